"""Slurm mode's reading of job states, without a cluster: ``squeue`` and ``sacct`` are replaced by
the answers a real controller gives, so each rule is checked even when Slurm is faster than the
daemon's polls."""

import subprocess

import pytest

from klique.worker import slurm
from klique.worker.slurm import SlurmRunner


class FakeSlurm:
    """Answers ``sbatch`` with job 7 and ``squeue`` with the state the test sets."""

    def __init__(self):
        self.state, self.exit_status, self.cancelled = "PENDING", 0, []

    def __call__(self, args, **kwargs):
        command, out = args[0], ""
        if command == "sbatch":
            out = "7\n"
        elif command == "squeue" and self.state:
            out = f"7 {self.state} {self.exit_status}\n"
        elif command == "scancel":
            self.cancelled.append(args[-1])
        return subprocess.CompletedProcess(args, 0, out, "")


@pytest.fixture
def fake(monkeypatch):
    answers = FakeSlurm()
    monkeypatch.setattr(slurm.subprocess, "run", answers)
    return answers


@pytest.fixture
def runner(tmp_path, fake):
    runner = SlurmRunner(tmp_path / "state", tmp_path / "ckpt", tag="t", pending_timeout_s=60)
    runner.start({"id": 1, "command": "true", "gpus": "1.000"}, ["0"])
    return runner


def kinds(changes):
    return [(c.kind, c.exit_code) for c in changes]


def test_a_job_seen_running_then_ended_reports_started_then_its_exit(runner, fake):
    fake.state = "RUNNING"
    assert kinds(runner.poll()) == [("running", None)]
    assert runner.poll() == []
    fake.state, fake.exit_status = "FAILED", 3 << 8
    assert kinds(runner.poll()) == [("exited", 3)]
    assert runner.jobs == {}


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY"])
def test_a_job_that_ran_between_two_polls_is_reported_started_before_its_exit(runner, fake, state):
    fake.state, fake.exit_status = state, 0 if state == "COMPLETED" else 1 << 8
    changes = runner.poll()
    assert [c.kind for c in changes] == ["running", "exited"]
    assert changes[0].detail == {"slurm_job": "7", "slurm_state": state}
    assert runner.jobs == {}


def test_a_job_cancelled_while_pending_never_ran_and_reports_no_start(runner, fake):
    fake.state = "CANCELLED"
    assert [c.kind for c in runner.poll()] == ["exited"]


def test_a_job_slurm_requeues_after_it_ran_is_cancelled_and_released(runner, fake):
    fake.state = "RUNNING"
    runner.poll()
    fake.state = "PENDING"
    assert [c.kind for c in runner.poll()] == ["released"]
    assert fake.cancelled == ["7"]


def test_a_job_pending_past_its_timeout_is_released(tmp_path, fake):
    now = [0.0]
    runner = SlurmRunner(tmp_path, tmp_path, tag="t", pending_timeout_s=5, clock=lambda: now[0])
    runner.start({"id": 2, "command": "true", "gpus": "2.000"}, ["0", "1"])
    assert runner.poll() == []
    now[0] = 6
    assert [c.kind for c in runner.poll()] == ["released"]
