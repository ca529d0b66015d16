"""What a pass decides: placements, preemptions, and a verdict for every task left waiting."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from .budget import units_to_hours

PHASES = ("fill", "reclaim", "priority", "lend")
REASONS = ("reclaim", "budget", "fair_share", "priority", "time_limit", "maintenance")
RULES = (
    "dependency",
    "budget_used_up",
    "policy_limit",
    "ancestor_limit",
    "budget_start_check",
    "array_limit",
    "behind_higher_priority",
    "cloud_cap_reached",
    "maintenance",
    "reclaim_held",
    "fair_share",
    "starving",
    "starvation_hold",
    "no_capacity",
    "never_fits",
)


@dataclass(frozen=True, slots=True)
class Placement:
    task: str
    resource: str
    pool: str
    phase: str


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop placed work and requeue it; `for_task` is the task a reclaim made room for; `window`
    the period of the used-up budget window that stopped it (reason budget; a money window's label,
    "month 500.00 EUR"). Reason time_limit
    (its `deadline` reached) stops it for good: it is not requeued, it ends timed out. Reason
    maintenance (its pool's window has started) requeues it at the front of its priority."""

    task: str
    resource: str
    pool: str
    reason: str
    for_task: str | None = None
    window: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """Why a task is still waiting after the pass.

    `position` is its place (1-based) among the waiting tasks of its compute resource. `pools`
    names the pools concerned (no_capacity: the profile's pools; behind_higher_priority: the
    pools that have or had room; cloud_cap_reached: the capped pools). `policy` is the policy whose
    limit or budget holds the task (cloud_cap_reached: the cap's id). Budget figures are in budget
    units; `reset_at` is the end of the used-up budget's period, or when the spend cap resets.
    `cause` says more: budget_used_up and budget_start_check, the window's period ("day"; a money
    window's label, "month 500.00 EUR", with the figures in money units);
    reclaim_held, what protects the victims ("min_runtime" or "max_preemptions", `reset_at` when
    the first of them is free again); never_fits, "capacity" (every enabled pool of its list is
    smaller, `pools` names the largest) or "no_pool" (no enabled pool in its list). fair_share:
    `policy` is the group (a child of a parent that lends "fair") that already borrows at least its
    fair share; `borrowed` and `share` are its borrowed GPUs and its fair share, in milli-GPUs.
    starving (the task holds `pools` for itself, the starvation guard): `needed` is its size and
    `free` the GPUs free there now, in milli-GPUs; starvation_hold: `pools` is a pool held for an
    older task, `cause` that task's id. dependency (a task of `Snapshot.held`): `waits_for` names
    the tasks it waits for, and `position` is 0 (it is not in line). array_limit: `cause` is its
    array, `max_running` the array's cap, which its placed tasks have reached. maintenance:
    `pools` the pool, `since` and `reset_at` its window's start and end, `cause` "in_maintenance"
    (the window has started) or "window_ahead" (the task's time limit would cross the start, or it
    has none).
    """

    task: str
    resource: str
    position: int
    rule: str
    pools: tuple[str, ...] = ()
    policy: str | None = None
    budget_left: int | None = None
    budget_needed: int | None = None
    reset_at: datetime | None = None
    cause: str | None = None
    borrowed: int | None = None
    share: int | None = None
    needed: int | None = None
    free: int | None = None
    waits_for: tuple[str, ...] = ()
    max_running: int | None = None
    since: datetime | None = None

    @property
    def hours_left(self) -> float | None:
        return None if self.budget_left is None else units_to_hours(self.budget_left)

    @property
    def hours_needed(self) -> float | None:
        return None if self.budget_needed is None else units_to_hours(self.budget_needed)


class VerdictSource(Protocol):
    def verdict(self, task_id: str) -> Verdict | None: ...

    def verdicts(self) -> Iterator[Verdict]: ...

    def group(self, resource_id: str, size: int) -> Verdict | None: ...

    def holders(self) -> tuple[Verdict, ...]: ...

    def held(self) -> tuple[Verdict, ...]: ...

    def array_limited(self) -> tuple[Verdict, ...]: ...

    def maintenance_held(self) -> tuple[Verdict, ...]: ...


@dataclass(frozen=True)
class Decisions:
    """Placements in the order they were made, preemptions likewise (time-limit stops first, then
    budget ones).

    Verdicts are derived lazily, so that a pass does not cost in proportion to queue depth.
    """

    placements: tuple[Placement, ...]
    preemptions: tuple[Preemption, ...]
    source: VerdictSource = field(compare=False, repr=False)

    def verdict(self, task_id: str) -> Verdict | None:
        """The verdict of a task that was waiting and is still waiting, or of a held task; None
        otherwise."""
        return self.source.verdict(task_id)

    def verdicts(self) -> Iterator[Verdict]:
        """Every task still waiting, by compute resource (snapshot order), then queue order; then
        the held tasks, in snapshot order."""
        return self.source.verdicts()

    def group_verdict(self, resource_id: str, size: int) -> Verdict | None:
        """The rule holding every waiting task of `size` in a compute resource, without reading
        the queue: a loader that stores verdicts per group pays per group, not per task."""
        return self.source.group(resource_id, size)

    def holders(self) -> tuple[Verdict, ...]:
        """The verdicts of the tasks that hold a pool for themselves (the starvation guard), which
        differ from their group's: a loader that stores verdicts per group writes these over it."""
        return self.source.holders()

    def held_verdicts(self) -> tuple[Verdict, ...]:
        """The verdicts (rule dependency) of the snapshot's held tasks, in its order; also given by
        `verdict()` and, after the waiting tasks', by `verdicts()`."""
        return self.source.held()

    def array_verdicts(self) -> tuple[Verdict, ...]:
        """The verdicts of the waiting tasks that their array's `max_running` holds (rule
        array_limit), which differ from their group's: a loader that stores verdicts per group
        writes these over it. Reads the queues, only when the snapshot caps an array."""
        return self.source.array_limited()

    def maintenance_verdicts(self) -> tuple[Verdict, ...]:
        """The verdicts of the waiting tasks that a pool's maintenance window ahead keeps off it
        (rule maintenance, cause window_ahead), which differ from their group's: a loader that
        stores verdicts per group writes these over it. Reads the queues only when some pool has a
        window ahead."""
        return self.source.maintenance_held()
