"""The demo's work that checkpoints touches its daemon's checkpoint mark each period (run here with
a period of one second by the real /bin/sh), so a reclaim of it on ``make run`` loses little."""

import subprocess

from apps.portal import demo_load


def test_demo_work_that_checkpoints_touches_the_mark_each_period_and_runs_its_whole_length(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(demo_load, "CHECKPOINT_EVERY_S", 1)
    mark = tmp_path / ".klique-checkpoint"
    command = demo_load.demo_command(2, checkpoint=True)
    assert command.count("touch") == 1 and demo_load.demo_command(2, checkpoint=False) == "sleep 2"
    done = subprocess.run(
        ["/bin/sh", "-c", command],
        env={"KLIQUE_CHECKPOINT_MARK": str(mark), "PATH": "/usr/bin:/bin"},
        timeout=30,
    )
    assert done.returncode == 0 and mark.exists()
