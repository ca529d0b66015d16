"""Liveness files for the Celery roles, which listen on no port: a worker touches
``KLIQUE_ALIVE_FILE`` every ``EVERY_S`` seconds from its own timer (a bootstep), and beat touches it
on each tick of its scheduler. The Helm chart's probes fail a pod whose file is over two minutes old
(``find FILE -mmin -2``): a process whose loop has stopped is restarted, not left hanging."""

import os
from pathlib import Path

from celery import bootsteps
from celery.beat import PersistentScheduler

EVERY_S = 10.0


def touch() -> None:
    if path := os.environ.get("KLIQUE_ALIVE_FILE"):
        try:
            Path(path).touch()
        except OSError:
            pass  # a read-only or missing folder: the probe reports it


class Alive(bootsteps.StartStopStep):
    """A Celery worker's bootstep: touch the alive file from the worker's timer."""

    requires = {"celery.worker.components:Timer"}

    def __init__(self, worker, **kwargs):
        super().__init__(worker, **kwargs)
        self.timer_entry = None

    def start(self, worker):
        touch()
        self.timer_entry = worker.timer.call_repeatedly(EVERY_S, touch, priority=10)

    def stop(self, worker):
        if self.timer_entry is not None:
            self.timer_entry.cancel()
            self.timer_entry = None


class AliveScheduler(PersistentScheduler):
    """beat's scheduler (the schedule file, as before) touching the alive file on every tick; beat
    ticks at least every ``beat_max_loop_interval`` (300 s by default, 60 s in our settings)."""

    def tick(self, *args, **kwargs):
        touch()
        return super().tick(*args, **kwargs)
