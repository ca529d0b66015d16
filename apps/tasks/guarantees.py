"""Reservations as measured guarantees (no Django): how soon work placed within its group's
reservation started after it entered its queue.

A run is one placement of a task (one usage interval). It is measured when it was placed within
the reservation (the GPUs the group held at that moment, plus the run's, fit in it) and started
in the period: its wait is from its queue entry (the last submit or requeue before the placement)
to its start. Within N seconds it is kept; past them it is a miss, with a cause: "start" when it
was placed within N seconds but its worker (or a cloud node's boot) took longer to start it; else
the engine's last wait reason between queue entry and placement; else "unknown". Each run is judged
against the reservation in force when it was placed (read back from the policy's audited changes).

Work never placed counts too: a task still waiting at the end of the measured period (now, for the
current one) whose wait already passed N seconds, while its group held less than its reservation by
at least the task's size, is a miss ("waiting") with the engine's current wait reason as cause. It
has no start, so it is in the runs and misses but not in the percentiles (``docs/ledger.md`` §12)."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from math import ceil

DEFAULT_START_S = 120
QUEUE_ENTRIES = ("submitted", "requeued")
UNKNOWN, START = "unknown", "start"


@dataclass(frozen=True, slots=True)
class Placement:
    """One usage interval: ``held`` is what the group held when it was placed, without this run
    (its open intervals then, and those placed in the same pass before it); ``reservation`` the
    group's reservation at that moment (None: the one ``runs`` is given)."""

    task: int
    placed_at: datetime
    gpus: Decimal
    held: Decimal
    reservation: Decimal | None = None


def reservation_at(current: Decimal, changes, at: datetime) -> Decimal:
    """The reservation in force at ``at``: the value before the first change after ``at``, else
    ``current``. ``changes``: (when, before) of each change of the reservation, in time order."""
    return next((before for when, before in changes if when > at), current)


@dataclass(frozen=True, slots=True)
class Event:
    task: int
    at: datetime
    kind: str
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Run:
    task: int
    queued_at: datetime
    placed_at: datetime
    started_at: datetime
    within: bool
    cause: str

    @property
    def wait_s(self) -> float:
        return (self.started_at - self.queued_at).total_seconds()


@dataclass(frozen=True, slots=True)
class Miss:
    task: int
    queued_at: datetime
    wait_s: float
    cause: str
    waiting: bool = False


@dataclass(frozen=True, slots=True)
class Waiting:
    """A task in its queue now: since its last queue entry, ``cause`` the engine's wait reason."""

    task: int
    queued_at: datetime
    gpus: Decimal
    cause: str = ""


@dataclass(frozen=True, slots=True)
class Guarantee:
    start_s: int
    count: int
    kept: int
    p50_s: float | None
    p95_s: float | None
    misses: tuple[Miss, ...]
    waits: tuple[float, ...] = ()

    @property
    def share(self) -> Decimal | None:
        """The share of measured runs started within ``start_s``; None with no run."""
        return Decimal(self.kept) / self.count if self.count else None


def runs(placements, events, reservation: Decimal, start_s: int = DEFAULT_START_S) -> list[Run]:
    """Pair each placement with its task's queue entry before it and its first start after it
    (before the next queue entry); placements never started are left out. ``events`` of any
    order; those of other kinds than submitted, requeued, started and verdict are ignored."""
    by_task: dict[int, list[Event]] = {}
    for event in sorted(events, key=lambda e: (e.task, e.at)):
        by_task.setdefault(event.task, []).append(event)
    found = []
    for placement in placements:
        queued = started = None
        cause = ""
        for event in by_task.get(placement.task, ()):
            if event.at <= placement.placed_at:
                if event.kind in QUEUE_ENTRIES:
                    queued, cause = event.at, ""
                elif event.kind == "verdict" and queued is not None:
                    cause = event.reason or cause
            elif event.kind in QUEUE_ENTRIES:
                break
            elif event.kind == "started":
                started = event.at
                break
        if queued is None or started is None:
            continue
        if (placement.placed_at - queued).total_seconds() <= start_s:
            cause = START
        reserved = reservation if placement.reservation is None else placement.reservation
        within = placement.held + placement.gpus <= reserved
        found.append(Run(placement.task, queued, placement.placed_at, started, within, cause or UNKNOWN))
    return found


def percentile(values: list[float], p: int) -> float | None:
    """The nearest-rank percentile: the smallest value with at least p % of the values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(ceil(p * len(ordered) / 100), 1) - 1]


def waiting_misses(waiting, held: Decimal, reservation: Decimal, at: datetime, start_s: int) -> list[Miss]:
    """The tasks waiting at ``at`` past ``start_s`` that the reservation had room for: the group held
    ``held`` GPUs then, and the task's GPUs fit in what was left of its reservation."""
    return [
        Miss(w.task, w.queued_at, (at - w.queued_at).total_seconds(), w.cause or UNKNOWN, waiting=True)
        for w in waiting
        if (at - w.queued_at).total_seconds() > start_s and held + w.gpus <= reservation
    ]


def measure(
    measured, start_s: int = DEFAULT_START_S, waiting: tuple[Miss, ...] | list[Miss] = ()
) -> Guarantee:
    """The guarantee figures of the runs within the reservation among ``measured``, with the misses
    of work still waiting (``waiting_misses``)."""
    within = [run for run in measured if run.within]
    waits = [run.wait_s for run in within]
    late = [Miss(run.task, run.queued_at, run.wait_s, run.cause) for run in within if run.wait_s > start_s]
    misses = tuple(sorted([*late, *waiting], key=lambda m: (m.queued_at, m.task)))
    return Guarantee(
        start_s=start_s,
        count=len(within) + len(waiting),
        kept=len(within) - len(late),
        p50_s=percentile(waits, 50),
        p95_s=percentile(waits, 95),
        misses=misses,
        waits=tuple(waits),
    )


def combine(figures) -> Guarantee:
    """Several groups' figures as one (a business unit's teams): runs, kept and misses summed, the
    percentiles over all their waits. ``start_s`` is the largest of theirs (each run was judged by
    its own policy's)."""
    figures = list(figures)
    waits = [wait for f in figures for wait in f.waits]
    return Guarantee(
        start_s=max((f.start_s for f in figures), default=DEFAULT_START_S),
        count=sum(f.count for f in figures),
        kept=sum(f.kept for f in figures),
        p50_s=percentile(waits, 50),
        p95_s=percentile(waits, 95),
        misses=tuple(sorted((m for f in figures for m in f.misses), key=lambda m: (m.queued_at, m.task))),
        waits=tuple(waits),
    )
