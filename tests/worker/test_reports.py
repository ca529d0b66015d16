"""What the daemon sends about work that ended or never started, with a control plane that answers
from a script: a report the control plane refuses (400) is sent again without its details rather
than dropped, so finished work is never run again; a task whose work cannot start is reported as a
start failure, not as stopped; a log tail is text any control plane can store."""

import os

from klique.worker.daemon import Daemon, Settings
from klique.worker.runs import Change
from klique.worker.slurm import SlurmRunner
from tests.worker.fakes import Clock, RecordingRunner, ScriptedControlPlane, task


class EndingRunner(RecordingRunner):
    """Each started task runs for one poll, then exits 0 with ``output`` as its log."""

    def __init__(self, output: str):
        super().__init__()
        self.output, self.running = output, []

    def poll(self) -> list:
        changes = [Change(t, "exited", 0) for t in self.running]
        changes += [Change(t, "running") for t in self.started]
        self.running, self.started = self.started, []
        return changes

    def log_tail(self, task_id: int) -> str:
        return self.output


def daemon(clock, control, runner) -> Daemon:
    settings = Settings(hostname="h", enrolment_token="kqe_x", devices=["GPU-0"], poll_min_s=1, poll_max_s=1)
    return Daemon(settings, control, runner, clock=clock)


def run_for(d: Daemon, clock: Clock, seconds: float) -> None:
    end = clock.now + seconds
    while clock.now < end:
        d.tick()
        clock.now += 0.25


def reports(control, what: str) -> list[dict]:
    return [body for kind, _, body in control.calls if kind == what]


def test_a_refused_exit_report_is_sent_again_without_its_log_tail_not_dropped():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]], refuse=lambda what, body: "log_tail" in body)
    d = daemon(clock, control, EndingRunner("done\n"))
    run_for(d, clock, 5)
    sent = reports(control, "exited")
    assert [set(body) for body in sent] == [{"at", "log_tail", "exit_code"}, {"at", "exit_code"}]
    assert sent[1]["exit_code"] == 0 and sent[1]["at"] == sent[0]["at"]
    assert d.held == {} and not d.reports
    assert 7 not in reports(control, "heartbeat")[-1]["tasks"]


def test_a_report_refused_again_is_reduced_to_what_must_arrive_then_given_up():
    clock = Clock()
    refuse = lambda what, body: what == "exited" and "at" in body  # noqa: E731
    control = ScriptedControlPlane(clock, claims=[[task(7)]], refuse=refuse)
    d = daemon(clock, control, EndingRunner("done\n"))
    run_for(d, clock, 5)
    assert [set(body) for body in reports(control, "exited")] == [
        {"at", "log_tail", "exit_code"},
        {"at", "exit_code"},
        {"exit_code"},
    ]
    assert d.held == {}


def test_the_log_tail_sent_holds_no_nul_and_no_lone_surrogate():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]])
    d = daemon(clock, control, EndingRunner("a\x00b\ud800c\n"))
    run_for(d, clock, 5)
    (sent,) = reports(control, "exited")
    assert sent["log_tail"] == "a\ufffdb\ufffdc\n"


def test_work_that_cannot_start_is_reported_as_a_start_failure_with_the_error():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]])
    d = daemon(clock, control, RecordingRunner(start_error="[Errno 7] Argument list too long: '/bin/sh'"))
    run_for(d, clock, 3)
    assert reports(control, "stopped") == []
    (sent,) = reports(control, "start_failed")
    assert sent["error"] == "[Errno 7] Argument list too long: '/bin/sh'" and "at" in sent
    assert d.held == {} and d.free == [1000]


def test_a_job_sbatch_refuses_is_reported_as_a_start_failure_with_sbatchs_reason(tmp_path, monkeypatch):
    refusal = "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\necho '{refusal}' >&2\nexit 1\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]])
    runner = SlurmRunner(tmp_path / "state", tmp_path / "ckpt", tag="t")
    d = daemon(clock, control, runner)
    run_for(d, clock, 3)
    (sent,) = reports(control, "start_failed")
    assert sent["error"] == refusal
    assert d.held == {} and reports(control, "stopped") == []
