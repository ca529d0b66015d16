"""What the engine sees at `now`: the estate, the queues and the work placed on pools.

Units: GPU amounts in integer milli-GPUs (1 GPU = 1000), time weights in milli-weights
(weight 1 = 1000), budgets in budget units (milli-weight x microseconds, see `budget`).

Ordering contracts the loader (database or simulator) keeps, so that a pass never sorts:
- each queue in `Snapshot.waiting` is in queue order: higher priority first, then seq;
- `Snapshot.placed` is in placement order, ascending (placed_at, seq);
- ordered id tuples (a pool's profiles, a profile's pools and policies) are priorities.
`validate(snapshot)` checks all of this; it is for loaders and tests, not for the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

PERIODS = ("day", "week", "month")
LENDING = ("priority", "fair")


@dataclass(frozen=True, slots=True)
class Maintenance:
    """A maintenance window on a pool, from `start` (included) to `end` (excluded), aware UTC."""

    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class Pool:
    """A set of nodes with a declared capacity; `profiles` is its execution priority.
    `maintenance`: its windows that have not ended at `now`, in start order, not overlapping; from
    a window's start to its end the pool's capacity is 0."""

    id: str
    capacity: int
    profiles: tuple[str, ...]
    enabled: bool = True
    maintenance: tuple[Maintenance, ...] = ()


@dataclass(frozen=True, slots=True)
class Profile:
    """A GPU size with a time weight, its pool order and its queuing priority (`policies`).

    With `size_from_task`, each task carries its own size and `size` is only the default the
    loader applies. A placed task of the profile is not a reclaim victim until it has held its
    placement for `min_runtime_s`. With `unlimited_before_maintenance`, its work without a time
    limit may be placed on a pool whose next maintenance window has not started.
    """

    id: str
    size: int
    pools: tuple[str, ...]
    policies: tuple[str, ...]
    time_weight: int = 1000
    size_from_task: bool = False
    min_runtime_s: int = 0
    starvation_s: int | None = None
    unlimited_before_maintenance: bool = False


@dataclass(frozen=True, slots=True)
class Budget:
    """A time budget, or with `rates` a money budget, and its state at `now`.

    `used` counts the budget units spent in the current period up to `now` by the policy's own
    work and by the work of every policy below it (the loader sums the subtree). A money budget
    (`rates` not None) counts money units (`budget.MONEY_UNITS`): `rates` maps a pool id to its
    price per GPU-hour in micro-units of `currency` (a pool not listed costs nothing).
    """

    limit: int
    period: str
    used: int
    rates: Mapping[str, int] | None = None
    currency: str = ""


@dataclass(frozen=True, slots=True)
class Policy:
    """A resource policy: reservation and limit in milli-GPUs, and any number of time budget
    windows (at most one per period), all enforced at once.

    With `max_preemptions_per_hour`, reclaim takes at most that many of the policy's own tasks in
    any sliding hour: `reclaims` holds the times of those it took in the hour before `now`, oldest
    first (the loader gives them only when the cap is set).

    `lending` is how the policy's children share what they borrow above their reservations:
    "priority" (in queuing order) or "fair" (in proportion to each child's `over_quota_weight`,
    in milli-weights). `lendable` (milli-GPUs, None: all of the reservation) caps how much of the
    policy's idle reservation is lent to work outside it.
    """

    id: str
    reservation: int
    limit: int
    parent: str | None = None
    budgets: tuple[Budget, ...] = ()
    max_preemptions_per_hour: int | None = None
    reclaims: tuple[datetime, ...] = ()
    lending: str = "priority"
    over_quota_weight: int = 1000
    lendable: int | None = None


@dataclass(frozen=True, slots=True)
class ComputeResource:
    """One policy joined to one profile: what work is sent to."""

    id: str
    policy: str
    profile: str


@dataclass(frozen=True, slots=True)
class WaitingTask:
    """A queued task. Higher `priority` goes first in its queue; `since` is when it joined the
    queue (for the starvation guard; None: unknown, never starving). `array` names its array when
    the array has a cap (`Snapshot.arrays`). `limit_s`: the seconds of time limit it has left (its
    limit less its running time so far; None: no limit), for pools with a maintenance window ahead."""

    id: str
    seq: int
    size: int
    priority: int = 0
    since: datetime | None = None
    array: str | None = None
    limit_s: int | None = None

    @property
    def key(self) -> tuple[int, int]:
        """Its place in its queue: higher priority first, then seq."""
        return (-self.priority, self.seq)


# `PlacedTask.saved_at` of work placed but not started yet (its worker or node still starting it).
NOT_STARTED = datetime.max.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class PlacedTask:
    """Work on a pool. A `preempting` task (stop asked, not yet stopped) counts for nothing.
    `deadline` is when its time limit is reached (running time only: None while it has not
    started, or without a limit); `array` as for a waiting task. `saved_at`: when its work was last
    saved, its last checkpoint in this run or the run's start (None: `placed_at`; `NOT_STARTED`:
    placed but not started, it loses nothing); a preemption loses `size` x (`now` - `saved_at`),
    never less than nothing."""

    id: str
    resource: str
    pool: str
    size: int
    seq: int
    placed_at: datetime
    preempting: bool = False
    priority: int = 0
    deadline: datetime | None = None
    array: str | None = None
    saved_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class HeldTask:
    """A queued task the pass does not consider: it runs after tasks that have not ended
    (`waits_for`, rule "dependency"). The loader decides (the live engine: the task's count of
    unended dependencies; the simulator: its own state); the pass gives it its verdict."""

    id: str
    resource: str
    seq: int
    waits_for: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SpendCap:
    """A spend cap that is reached: `pools` take no new work from `policies` until `resets_at`.

    Work already placed goes on. The loader lists every policy the cap covers (a scope's whole
    subtree), so the pass only tests membership. `id` names the cap in verdicts.
    """

    id: str
    pools: tuple[str, ...]
    policies: frozenset[str]
    resets_at: datetime


@dataclass(frozen=True)
class Snapshot:
    """The engine's whole input. `waiting` maps a compute resource id to its queue; `held` are
    queued tasks waiting for their dependencies; `arrays` caps how many tasks of an array may be
    placed at once (array id to its `max_running`)."""

    now: datetime
    pools: tuple[Pool, ...]
    profiles: tuple[Profile, ...]
    policies: tuple[Policy, ...]
    resources: tuple[ComputeResource, ...]
    waiting: Mapping[str, Sequence[WaitingTask]]
    placed: tuple[PlacedTask, ...]
    low_watermark_s: int = 900
    caps: tuple[SpendCap, ...] = ()
    held: tuple[HeldTask, ...] = ()
    arrays: Mapping[str, int] = field(default_factory=dict)


class SnapshotError(ValueError):
    pass


def validate(snapshot: Snapshot) -> None:
    """Raise SnapshotError on the first broken rule or ordering contract."""
    s = snapshot
    _check(s.now.tzinfo is not None and s.now.utcoffset() == timedelta(0), "now must be aware UTC")
    _check(s.low_watermark_s >= 0, "low_watermark_s must be >= 0")
    pools = _unique("pool", s.pools)
    profiles = _unique("profile", s.profiles)
    policies = _unique("policy", s.policies)
    resources = _unique("compute resource", s.resources)

    for pool in s.pools:
        _check(pool.capacity >= 0, f"pool {pool.id}: capacity must be >= 0")
        _check_windows(pool, s.now)
        _distinct(f"pool {pool.id}: profiles", pool.profiles)
        for f in pool.profiles:
            _check(f in profiles, f"pool {pool.id}: unknown profile {f}")
            _check(pool.id in profiles[f].pools, f"pool {pool.id}: profile {f} does not list this pool")
    for f in s.profiles:
        _check(f.size >= 0, f"profile {f.id}: size must be >= 0")
        _check(f.time_weight >= 0, f"profile {f.id}: time_weight must be >= 0")
        _check(f.min_runtime_s >= 0, f"profile {f.id}: min_runtime_s must be >= 0")
        _check(f.starvation_s is None or f.starvation_s >= 0, f"profile {f.id}: starvation_s must be >= 0")
        _distinct(f"profile {f.id}: pools", f.pools)
        _distinct(f"profile {f.id}: policies", f.policies)
        for p in f.pools:
            _check(p in pools, f"profile {f.id}: unknown pool {p}")
            _check(f.id in pools[p].profiles, f"profile {f.id}: pool {p} does not list this profile")
        for p in f.policies:
            _check(p in policies, f"profile {f.id}: unknown policy {p}")
    for p in s.policies:
        _check(0 <= p.reservation <= p.limit, f"policy {p.id}: needs 0 <= reservation <= limit")
        _check(p.parent is None or p.parent in policies, f"policy {p.id}: unknown parent {p.parent}")
        for b in p.budgets:
            _check(b.period in PERIODS, f"policy {p.id}: budget period must be one of {PERIODS}")
            _check(b.limit >= 0 and b.used >= 0, f"policy {p.id}: budget limit and used must be >= 0")
            if b.rates is not None:
                _check(bool(b.currency), f"policy {p.id}: a money budget needs its currency")
                _check(
                    all(isinstance(r, int) and r >= 0 for r in b.rates.values()),
                    f"policy {p.id}: money budget rates must be integers >= 0",
                )
        _distinct(f"policy {p.id}: budget periods", tuple(b.period for b in p.budgets if b.rates is None))
        _distinct(
            f"policy {p.id}: money budget periods", tuple(b.period for b in p.budgets if b.rates is not None)
        )
        _check(
            p.max_preemptions_per_hour is None or p.max_preemptions_per_hour >= 0,
            f"policy {p.id}: max_preemptions_per_hour must be >= 0",
        )
        _check(list(p.reclaims) == sorted(p.reclaims), f"policy {p.id}: reclaims not in time order")
        _check(p.lending in LENDING, f"policy {p.id}: lending must be one of {LENDING}")
        _check(p.over_quota_weight >= 0, f"policy {p.id}: over_quota_weight must be >= 0")
        _check(
            p.lendable is None or 0 <= p.lendable <= p.reservation,
            f"policy {p.id}: lendable must be between 0 and the reservation",
        )
    for p in s.policies:
        seen = {p.id}
        parent = p.parent
        while parent is not None:
            _check(parent not in seen, f"policy {p.id}: parent cycle")
            seen.add(parent)
            parent = policies[parent].parent
    for r in s.resources:
        _check(r.policy in policies, f"compute resource {r.id}: unknown policy {r.policy}")
        _check(r.profile in profiles, f"compute resource {r.id}: unknown profile {r.profile}")
        profile = profiles[r.profile]
        _check(r.policy in profile.policies, f"compute resource {r.id}: policy not in the profile's order")
        _check(
            profile.size_from_task or profile.size <= policies[r.policy].limit,
            f"compute resource {r.id}: profile larger than the policy's limit",
        )

    task_ids: set[str] = set()
    for rid, queue in s.waiting.items():
        _check(rid in resources, f"waiting: unknown compute resource {rid}")
        profile = profiles[resources[rid].profile]
        last = None
        for t in queue:
            _check(t.id not in task_ids, f"task {t.id}: appears twice")
            task_ids.add(t.id)
            _check(last is None or t.key > last, f"waiting {rid}: queue not in queue order at {t.id}")
            last = t.key
            _check(t.limit_s is None or t.limit_s >= 0, f"task {t.id}: limit_s must be >= 0")
            if profile.size_from_task:
                _check(t.size > 0, f"task {t.id}: size must be > 0")
            else:
                _check(t.size == profile.size, f"task {t.id}: size differs from its profile's")
    caps = _unique("spend cap", s.caps)
    for cap in caps.values():
        _check(cap.resets_at.tzinfo is not None, f"spend cap {cap.id}: resets_at must be aware UTC")
        for p in cap.pools:
            _check(p in pools, f"spend cap {cap.id}: unknown pool {p}")
        for p in cap.policies:
            _check(p in policies, f"spend cap {cap.id}: unknown policy {p}")
    last_key = None
    for t in s.placed:
        _check(t.id not in task_ids, f"task {t.id}: appears twice")
        task_ids.add(t.id)
        _check(t.deadline is None or t.deadline.tzinfo is not None, f"placed {t.id}: deadline must be aware")
        _check(t.resource in resources, f"placed {t.id}: unknown compute resource {t.resource}")
        _check(t.pool in pools, f"placed {t.id}: unknown pool {t.pool}")
        _check(t.size >= 0, f"placed {t.id}: size must be >= 0")
        key = (t.placed_at, t.seq)
        _check(last_key is None or key >= last_key, f"placed: not in placement order at {t.id}")
        last_key = key
    for h in s.held:
        _check(h.id not in task_ids, f"task {h.id}: appears twice")
        task_ids.add(h.id)
        _check(h.resource in resources, f"held {h.id}: unknown compute resource {h.resource}")
        _check(bool(h.waits_for), f"held {h.id}: waits for nothing")
    for a, most in s.arrays.items():
        _check(isinstance(most, int) and most >= 0, f"array {a}: max_running must be >= 0")


def _check_windows(pool: Pool, now: datetime) -> None:
    last = None
    for w in pool.maintenance:
        for at in (w.start, w.end):
            _check(
                at.tzinfo is not None and at.utcoffset() == timedelta(0), f"pool {pool.id}: window not UTC"
            )
        _check(w.start < w.end, f"pool {pool.id}: a maintenance window must end after its start")
        _check(w.end > now, f"pool {pool.id}: a maintenance window that has ended")
        _check(
            last is None or w.start >= last.end,
            f"pool {pool.id}: maintenance windows overlap or not in order",
        )
        last = w


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise SnapshotError(message)


def _unique(kind: str, items) -> dict:
    by_id = {}
    for item in items:
        _check(item.id not in by_id, f"{kind} {item.id}: duplicate id")
        by_id[item.id] = item
    return by_id


def _distinct(what: str, ids: tuple[str, ...]) -> None:
    _check(len(set(ids)) == len(ids), f"{what}: listed twice")
