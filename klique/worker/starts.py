"""Claimed tasks started side by side: a claim of fifty tasks is not started one after the other
(a process spawn or a pod create each), and each start is reported as soon as it has happened.

Only for runners whose ``start`` may run in several threads at once (``concurrent_starts``). The
threads call the runner and nothing else; the daemon's state (its held tasks, free GPUs, reports)
is touched only by its own loop, which takes each start's outcome from ``finished``."""

import queue
import threading
from concurrent.futures import ThreadPoolExecutor

START_THREADS = 8


class Starter:
    def __init__(self, runner, attempt, wake):
        """``attempt(held, devices)``: the start itself, returning its failure or None; ``wake``:
        set when one has returned, so the loop takes it at once."""
        self.concurrent = bool(getattr(runner, "concurrent_starts", False))
        self.attempt, self.wake = attempt, wake
        self.results: queue.SimpleQueue = queue.SimpleQueue()
        self.pool: ThreadPoolExecutor | None = None
        self.in_flight = 0
        self.returned = threading.Condition()

    def submit(self, held, devices: list[str]) -> None:
        if self.pool is None:
            self.pool = ThreadPoolExecutor(max_workers=START_THREADS, thread_name_prefix="klique-start")
        with self.returned:
            self.in_flight += 1
        self.pool.submit(self._run, held, devices)

    def _run(self, held, devices: list[str]) -> None:
        try:
            self.results.put((held, self.attempt(held, devices)))
        finally:
            with self.returned:
                self.in_flight -= 1
                self.returned.notify_all()
            self.wake.set()

    def settle(self, timeout: float = 30.0) -> bool:
        """Wait until no start is in flight (a test's fake clock, a shutdown); False on time-out."""
        with self.returned:
            return self.returned.wait_for(lambda: self.in_flight == 0, timeout)

    def finished(self) -> list:
        """The (held task, failure or None) of each start that has returned since the last call."""
        found = []
        while True:
            try:
                found.append(self.results.get_nowait())
            except queue.Empty:
                return found

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
