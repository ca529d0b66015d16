"""What the daemon sends about work that ended or never started, with a control plane that answers
from a script: a report the control plane refuses (400) is sent again without its details rather
than dropped, so finished work is never run again; a task whose work cannot start anywhere (E2BIG,
a job sbatch refuses) is reported as a start failure, while a start error of this host (EMFILE,
sbatch timing out) hands the work back as stopped; a log tail is text any control plane can store."""

import contextlib
import os
import resource

import pytest

from klique.worker import slurm
from klique.worker.daemon import Daemon, Settings
from klique.worker.process import ProcessRunner
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
        d.starter.settle()  # a process runner starts in threads: its outcome is taken next tick
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


def test_a_command_above_the_argument_limit_is_a_start_failure_with_the_error(tmp_path):
    """E2BIG recurs wherever the task runs: its own command is above the OS's argument limit."""
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[{**task(7), "command": "true " + "x" * 1_000_000}]])
    d = daemon(clock, control, ProcessRunner(tmp_path / "state", tmp_path / "ckpt"))
    run_for(d, clock, 3)
    assert reports(control, "stopped") == []
    (sent,) = reports(control, "start_failed")
    assert "Argument list too long" in sent["error"] and "at" in sent
    assert d.held == {} and d.free == [1000]


@pytest.mark.parametrize("spec", [{"env": "x"}, {"env": ["A=1"]}, "not an object"])
def test_a_task_whose_spec_the_runner_cannot_read_is_a_start_failure_and_the_daemon_runs_on(tmp_path, spec):
    """Such a task once crashed every daemon that claimed it; the next task must still run."""
    clock = Clock()
    bad, good = {**task(7), "spec": spec}, task(8)
    control = ScriptedControlPlane(clock, claims=[[bad], [good]])
    d = daemon(clock, control, ProcessRunner(tmp_path / "state", tmp_path / "ckpt"))
    run_for(d, clock, 3)
    (sent,) = reports(control, "start_failed")
    assert "spec" in sent["error"]
    assert 8 in d.held or reports(control, "exited")


@contextlib.contextmanager
def out_of_file_descriptors():
    """The soft RLIMIT_NOFILE lowered to the lowest free descriptor: the next open fails EMFILE."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowest_free = os.open(os.devnull, os.O_RDONLY)
    os.close(lowest_free)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowest_free, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_start_error_of_this_host_is_handed_back_as_stopped_not_a_start_failure(tmp_path):
    """EMFILE, like ENOSPC or EAGAIN on fork, is this host's trouble, not the task's: counting it as a
    failed start would let one sick host fail a whole queue. The work is handed back (``stopped``)
    and requeued without using up a start attempt."""
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]])
    d = daemon(clock, control, ProcessRunner(tmp_path / "state", tmp_path / "ckpt"))
    with out_of_file_descriptors():
        run_for(d, clock, 3)
    assert reports(control, "start_failed") == []
    (sent,) = reports(control, "stopped")
    assert "could not start it" in sent["log_tail"] and "Too many open files" in sent["log_tail"]
    assert d.held == {} and d.free == [1000]


def fake_sbatch(tmp_path, monkeypatch, body: str) -> SlurmRunner:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(f"#!/bin/sh\n{body}\n")
    (bin_dir / "sbatch").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    return SlurmRunner(tmp_path / "state", tmp_path / "ckpt", tag="t")


def test_a_job_sbatch_refuses_is_reported_as_a_start_failure_with_sbatchs_reason(tmp_path, monkeypatch):
    refusal = "sbatch: error: Batch job submission failed: Invalid generic resource (gres) specification"
    runner = fake_sbatch(tmp_path, monkeypatch, f"echo '{refusal}' >&2\nexit 1")
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]])
    d = daemon(clock, control, runner)
    run_for(d, clock, 3)
    (sent,) = reports(control, "start_failed")
    assert sent["error"] == refusal
    assert d.held == {} and reports(control, "stopped") == []


@pytest.mark.parametrize(
    "sbatch",
    [
        "exec sleep 60",
        "echo 'sbatch: error: Batch job submission failed: Unable to contact slurm controller"
        " (connect failure)' >&2\nexit 1",
    ],
    ids=["times-out", "controller-unreachable"],
)
def test_sbatch_timing_out_or_not_reaching_the_controller_is_handed_back_not_a_start_failure(
    tmp_path, monkeypatch, sbatch
):
    """Not a refusal of the job: the controller did not answer this host. Another try (here or on
    another worker) may well submit it, so no start attempt is used up."""
    monkeypatch.setattr(slurm, "COMMAND_TIMEOUT_S", 1)
    runner = fake_sbatch(tmp_path, monkeypatch, sbatch)
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]])
    d = daemon(clock, control, runner)
    run_for(d, clock, 3)
    assert reports(control, "start_failed") == []
    (sent,) = reports(control, "stopped")
    assert "could not start it" in sent["log_tail"]
    assert d.held == {} and d.free == [1000]
