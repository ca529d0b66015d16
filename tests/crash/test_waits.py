"""The crash suite waits on progress, not on a fixed time (``tests.crash.stack.wait_on_progress``):
on a loaded machine a drain that keeps moving is waited for however long it takes, and one that
stops moving fails, saying what was stuck. On a virtual clock, with no process started."""

import time
from types import SimpleNamespace

import pytest

from tests.crash import stack as crash_stack
from tests.crash.stack import Stack


class Clock:
    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock.monotonic)
    monkeypatch.setattr(time, "sleep", clock.sleep)
    return clock


class Draining(Stack):
    """A stack whose ``tasks`` end one every ``every`` seconds of the clock, until ``left`` remain."""

    def __init__(self, folder, clock: Clock, tasks: int, every: float, left: int = 0):
        self.clock, self.tasks, self.every, self.left = clock, tasks, every, left
        self.stop_file = folder / "stop"
        self.submitter = SimpleNamespace(process=SimpleNamespace(poll=lambda: 0, wait=lambda timeout: 0))
        self.processes = []

    def ended(self) -> int:
        return min(self.tasks - self.left, int(self.clock.now / self.every))

    def query(self, sql: str, *args):
        if "tasks_taskevent" in sql:
            return 3 * self.ended()  # placed, claimed, ended
        return self.tasks - self.ended()

    def check(self, final: bool = False) -> dict:
        return {"final": final, "ended": self.ended()}

    def unended(self) -> str:
        return f"{self.tasks - self.ended()} tasks queued"


def test_a_drain_that_keeps_moving_is_waited_for_past_any_fixed_deadline(tmp_path, clock):
    # 1,000 tasks, one ending every second of the virtual clock: far longer than any fixed drain
    # deadline, but never a stall.
    stack = Draining(tmp_path, clock, tasks=1000, every=1.0)
    assert stack.drain() == {"final": True, "ended": 1000}


def test_a_drain_that_stops_moving_fails_saying_what_was_stuck(tmp_path, clock):
    stack = Draining(tmp_path, clock, tasks=100, every=1.0, left=40)
    with pytest.raises(AssertionError, match="every task to end: no progress") as failure:
        stack.drain()
    assert "40 tasks queued" in str(failure.value)


def test_a_wait_without_progress_fails_after_the_stall_limit_and_one_still_moving_at_the_cap(clock):
    with pytest.raises(AssertionError, match="the web server: no progress"):
        crash_stack.wait_on_progress(lambda: False, what="the web server")
    moving = iter(range(10**9))
    with pytest.raises(AssertionError, match="every task to end: over"):
        crash_stack.wait_on_progress(lambda: False, lambda: next(moving), what="every task to end")
