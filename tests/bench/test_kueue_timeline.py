"""bench/kueue_timeline.py: the GPU-seconds of a run split into running, placed and free."""

import subprocess
import sys

from django.conf import settings

HEADER = "id,gpus,state,submitted_at,placed_at,claimed_at,started_at,ended_at\n"


def test_timeline_splits_the_pools_gpu_seconds_into_running_placed_and_free(tmp_path):
    # A pool of 2 GPUs and one 1-GPU task: placed at 0, claimed at 0.5, started at 1, ended at 3.
    csv = tmp_path / "tasks.csv"
    csv.write_text(HEADER + "1,1,succeeded,0,0,0.5,1,3\n")
    out = subprocess.run(
        [sys.executable, "bench/kueue_timeline.py", str(csv), "--gpus", "2"],
        cwd=settings.BASE_DIR,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # 6 GPU-seconds in all: 2 running, 1 placed before its start, 3 free.
    assert "makespan 3.0 s" in out
    assert "running 2 (33%), placed, not started 1 (17%), free 3 (50%)" in out
    assert "1 GPU: 1 tasks, placed->claimed p50 0.500 s, claimed->started p50 0.500 s" in out
