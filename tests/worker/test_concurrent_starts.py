"""A claim's tasks start side by side where the runner allows (``concurrent_starts``), and each
is reported as soon as it has started; what happens to a task while its start is in flight (a
stop, an abandon, a failure) is done to it once the start returns (klique/worker/starts.py)."""

import threading

from klique.worker.daemon import Daemon, Settings
from klique.worker.process import ProcessRunner
from klique.worker.runs import Change, StartFailed
from klique.worker.starts import START_THREADS
from tests.worker.fakes import Clock, RecordingRunner, ScriptedControlPlane, task


class SideBySide(RecordingRunner):
    """A start returns only once ``START_THREADS`` starts are in it together (or fails after 10 s)."""

    concurrent_starts = True

    def __init__(self):
        super().__init__()
        self.together = threading.Barrier(START_THREADS)
        self.lock = threading.Lock()

    def start(self, task: dict, devices: list[str]) -> None:
        try:
            self.together.wait(10)
        except threading.BrokenBarrierError as error:
            raise StartFailed("started alone", recurs=True) from error
        with self.lock:
            self.started.append(task["id"])

    def poll(self) -> list:
        with self.lock:
            started, self.started = self.started, []
        return [Change(t, "running") for t in started]


class Held(RecordingRunner):
    """Each start waits until the test lets it go (``go``); then it fails when ``fail``."""

    concurrent_starts = True

    def __init__(self, fail: bool = False):
        super().__init__()
        self.go, self.fail = threading.Event(), fail

    def start(self, task: dict, devices: list[str]) -> None:
        self.go.wait(10)
        if self.fail:
            raise StartFailed("no such image", recurs=True)
        self.started.append(task["id"])


def daemon(clock, control, runner, gpus: int = 1) -> Daemon:
    settings = Settings(
        hostname="h", enrolment_token="kqe_x", devices=[f"GPU-{i}" for i in range(gpus)], poll_min_s=1
    )
    d = Daemon(settings, control, runner, clock=clock)
    d.enrol()
    return d


def tick(d: Daemon, clock: Clock, settle: bool = True) -> None:
    d.tick()
    if settle:
        d.starter.settle()
    clock.now += 0.25


def test_a_claims_tasks_start_side_by_side_and_each_start_is_reported():
    """Rule: a claim of eight tasks has all eight starts in flight at once (a runner that returns
    only when eight are in it together), and every start is reported in the next sync."""
    clock = Clock()
    claimed = [task(i) for i in range(1, START_THREADS + 1)]
    control = ScriptedControlPlane(clock, claims=[claimed], heartbeat_s=1000)
    d = daemon(clock, control, SideBySide(), gpus=START_THREADS)
    for _ in range(4):
        tick(d, clock)
    assert len([kind for kind, _, _ in control.calls if kind == "started"]) == START_THREADS
    assert [kind for kind, _, _ in control.calls if kind == "start_failed"] == []


def test_a_stop_while_the_start_is_in_flight_is_sent_once_it_has_started():
    """Rule: a stop that arrives while the task's start runs is applied when the start returns,
    with what is left of its grace."""
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]], heartbeat_s=1000)
    runner = Held()
    d = daemon(clock, control, runner)
    tick(d, clock, settle=False)
    assert d.held[7].starting
    d.stop(7, "cancel", 30.0, clock.now)
    assert runner.terminated == []
    runner.go.set()
    d.starter.settle()
    tick(d, clock)
    assert [task_id for task_id, _ in runner.terminated] == [7]
    assert 0 < runner.terminated[0][1] <= 30.0


def test_a_start_that_fails_in_its_thread_is_reported_and_frees_its_gpus():
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]], heartbeat_s=1000)
    runner = Held(fail=True)
    runner.go.set()
    d = daemon(clock, control, runner)
    for _ in range(3):
        tick(d, clock)
    (sent,) = [body for kind, _, body in control.calls if kind == "start_failed"]
    assert sent["error"] == "no such image"
    assert d.free == [1000]


def test_work_abandoned_while_it_starts_is_killed_when_the_start_returns():
    """Rule: a task the control plane no longer counts as ours (abandon) is killed as soon as its
    in-flight start has returned, never left running."""
    clock = Clock()
    control = ScriptedControlPlane(clock, claims=[[task(7)]], heartbeat_s=1000)
    runner = Held()
    d = daemon(clock, control, runner)
    tick(d, clock, settle=False)
    d.abandon()
    runner.go.set()
    d.starter.settle()
    tick(d, clock)
    assert runner.killed == [7]


def test_the_process_runner_starts_in_threads(tmp_path):
    assert ProcessRunner(tmp_path / "s", tmp_path / "c").concurrent_starts
