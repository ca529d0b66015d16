"""Sessions in the simulator: when a session with an activity profile first stops, and what its
idle limits freed (docs/engine.md section 8, "Sessions").

A session's activity is `(offset from its start, busy)` entries; before the first entry it is busy
(nothing measured yet never counts as idle, as in the live check) and each entry holds until the
next. "Busy" stands for every measured metric above its threshold, so the live CPU, GPU, network
and Jupyter idle limits are one limit here, `idle`, with `lifetime` beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .scenario_model import IdleLimitsSpec

STOP_ORDER = ("completed", "idle", "lifetime")


def idle_deadline(activity: tuple[tuple[int, bool], ...], idle_us: int | None) -> int | None:
    """The offset at which the session has been not busy for `idle_us` without a break: `since +
    idle_us`, unless a busy entry comes before that (a busy entry exactly then is too late)."""
    if idle_us is None:
        return None
    since = None
    for at, busy in activity:
        if since is not None and at >= since + idle_us:
            return since + idle_us
        if busy:
            since = None
        elif since is None:
            since = at
    return None if since is None else since + idle_us


def first_stop(
    activity: tuple[tuple[int, bool], ...], duration_us: int | None, limits: IdleLimitsSpec
) -> tuple[int, str] | None:
    """(offset from its start, why) of the session's first stop: `completed` at its duration,
    else the `idle` or `lifetime` limit, the earliest (on a tie in that order); None: it runs until
    stopped from outside."""
    due = []
    if duration_us is not None:
        due.append((duration_us, "completed"))
    idle = idle_deadline(activity, limits.idle_us)
    if idle is not None:
        due.append((idle, "idle"))
    if limits.max_lifetime_us is not None:
        due.append((limits.max_lifetime_us, "lifetime"))
    if not due:
        return None
    return min(due, key=lambda d: (d[0], STOP_ORDER.index(d[1])))


def freed_until(
    stopped_us: int, started_us: int, duration_us: int | None, cancels: list[int], end_us: int
) -> int:
    """Where the session stopped at `stopped_us` by a limit would have run to without limits: its
    duration's end, its owner's next cancel, or the end of the run, the earliest."""
    until = end_us
    if duration_us is not None:
        until = min(until, started_us + duration_us)
    later = [c for c in cancels if c >= stopped_us]
    if later:
        until = min(until, later[0])
    return max(until, stopped_us)


@dataclass
class Tally:
    """The sessions of one compute resource (or all): GPU-microseconds used and freed."""

    sessions: int = 0
    gpu_us: int = 0
    freed_gpu_us: int = 0
    stopped: dict[str, int] = field(default_factory=lambda: {"idle": 0, "lifetime": 0})

    def add(self, other: Tally) -> None:
        self.sessions += other.sessions
        self.gpu_us += other.gpu_us
        self.freed_gpu_us += other.freed_gpu_us
        for k, n in other.stopped.items():
            self.stopped[k] += n

    def line(self, gpu_us_per_hour: int) -> dict:
        return {
            "sessions": self.sessions,
            "gpu_hours": round(self.gpu_us / gpu_us_per_hour, 6),
            "freed_gpu_hours": round(self.freed_gpu_us / gpu_us_per_hour, 6),
            "stopped": dict(self.stopped),
        }
