"""Process mode on its own: a task's whole process group is stopped, exit codes read as a shell
shows them, and a restarted daemon kills what a crashed one left running, and nothing else."""

import json
import os
import subprocess
import time

from klique.worker.process import ProcessRunner


def task(task_id, command):
    return {
        "id": task_id,
        "command": command,
        "gpus": "1.000",
        "spec": {"env": {"EPOCHS": 3, "bad name": "x"}},
    }


def wait_exit(runner, task_id, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for change in runner.poll():
            if change.task_id == task_id and change.kind == "exited":
                return change.exit_code
        time.sleep(0.02)
    raise AssertionError("no exit")


def test_the_task_sees_its_spec_env_and_klique_variables(tmp_path):
    runner = ProcessRunner(tmp_path / "state", tmp_path / "ck")
    runner.start(task(5, f"env > {tmp_path}/env"), ["GPU-a"])
    assert wait_exit(runner, 5) == 0
    env = dict(line.split("=", 1) for line in (tmp_path / "env").read_text().splitlines() if "=" in line)
    assert env["EPOCHS"] == "3" and env["KLIQUE_TASK_ID"] == "5" and env["KLIQUE_GPUS"] == "1.000"
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-a" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["KLIQUE_CHECKPOINT_DIR"] == str(tmp_path / "ck" / "5") and (tmp_path / "ck" / "5").is_dir()


def test_a_stop_reaches_every_process_of_the_task(tmp_path):
    runner = ProcessRunner(tmp_path, tmp_path / "ck")
    runner.start(task(1, f"sleep 60 & echo $! > {tmp_path}/child; wait"), [])
    deadline = time.monotonic() + 5
    while not (tmp_path / "child").exists() or not (tmp_path / "child").read_text().strip():
        assert time.monotonic() < deadline
        time.sleep(0.02)
    child = int((tmp_path / "child").read_text())
    runner.terminate(1)
    assert wait_exit(runner, 1) == 143
    time.sleep(0.1)
    assert not os.path.exists(f"/proc/{child}") or "Z" in open(f"/proc/{child}/stat").read().split()[2]


def test_a_killed_task_exits_as_128_plus_sigkill(tmp_path):
    runner = ProcessRunner(tmp_path, tmp_path / "ck")
    runner.start(task(2, "trap '' TERM; sleep 60"), [])
    runner.poll()
    runner.kill(2)
    assert wait_exit(runner, 2) == 137


def test_a_restarted_daemon_kills_what_the_last_one_left_running_and_nothing_else(tmp_path):
    crashed = ProcessRunner(tmp_path, tmp_path / "ck")
    crashed.start(task(3, "sleep 60"), [])
    left = crashed.processes[3]
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    ledger = json.loads((tmp_path / "running.json").read_text())
    ledger["4"] = stranger.pid
    (tmp_path / "running.json").write_text(json.dumps(ledger))
    try:
        assert ProcessRunner(tmp_path, tmp_path / "ck").kill_leftovers() == [3]
        assert left.wait(timeout=5) == -9
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_a_start_and_an_exit_carry_the_time_they_happened_not_the_time_they_were_seen(tmp_path):
    from klique.worker.runs import utc_now

    runner = ProcessRunner(tmp_path, tmp_path / "ck")
    before = utc_now()
    runner.start(task(3, "true"), [])
    started = utc_now()
    deadline = time.monotonic() + 10
    while runner.seen_at.get((3, "exited")) is None:
        assert time.monotonic() < deadline, "the exit was never seen"
        time.sleep(0.02)
    ended = utc_now()
    time.sleep(0.2)  # the daemon looks later: the changes keep the earlier times
    changes = {change.kind: change for change in runner.poll()}
    assert before <= changes["running"].at <= started
    # `true` may exit before start() returns under load: the exit is after the start, before `ended`
    assert changes["running"].at <= changes["exited"].at <= ended
