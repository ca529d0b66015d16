"""How often worker daemons heartbeat, and how long a silent one has before it is lost: the one
owner of both, read by enrolment, the heartbeat's answer and the sweep.

The interval grows with the estate so that its daemons' periodic syncs stay within
``WORKER_SYNCS_PER_S`` a second: at most ``WORKER_HEARTBEAT_S`` (5 s) up to 500 daemons at the
default 100 a second, 20 s for 2,000. The timeout keeps its ratio to the interval
(``WORKER_HEARTBEAT_TIMEOUT_S`` / ``WORKER_HEARTBEAT_S``, 6). Each heartbeat stores the timeout its
worker was told (``Worker.heartbeat_timeout``), and the sweep waits the longer of that and today's,
so a worker is never marked lost sooner than it was told, however the estate changes meanwhile."""

import time
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings

from apps.pools.models import Worker

COUNT_EVERY_S = 10.0  # how long a process reuses its count of active daemons
_counted: tuple[float, int] | None = None


@dataclass(frozen=True)
class Timing:
    interval_s: float
    timeout_s: float

    @property
    def timeout(self) -> timedelta:
        return timedelta(seconds=self.timeout_s)


def timing_for(active: int) -> Timing:
    """The heartbeat interval and timeout for an estate of ``active`` daemons."""
    base, timeout = float(settings.WORKER_HEARTBEAT_S), float(settings.WORKER_HEARTBEAT_TIMEOUT_S)
    interval = max(base, active / float(settings.WORKER_SYNCS_PER_S))
    return Timing(interval_s=round(interval, 3), timeout_s=round(max(timeout, interval * timeout / base), 3))


def timing() -> Timing:
    """This estate's timing, from a count of active daemons at most ``COUNT_EVERY_S`` old."""
    global _counted
    clock = time.monotonic()
    if _counted is None or clock - _counted[0] > COUNT_EVERY_S:
        _counted = (clock, Worker.objects.filter(state=Worker.State.ACTIVE).count())
    return timing_for(_counted[1])


def forget() -> None:
    """Count the daemons again at the next call (tests, and a bulk enrolment)."""
    global _counted
    _counted = None
