"""Load the engine core's snapshot from the database in a fixed number of queries.

Ids in the snapshot are the database primary keys as strings. A task's seq in the snapshot is its
queue rank (project priority, then queue seq: ``apps.tasks.selectors.with_queue_rank``) and its
priority is the task's own (``Task.priority``). Queues come out of the database already in queue
order, higher task priority first and then the queue rank, and placed work in placement order, as
the core expects.

A waiting task's ``since`` is its ``submitted_at``, or its ``released_at`` when it waited for
dependencies (the moment the last of them ended: the simulator's rule). The task table keeps no
time of its last requeue (only its events do, and reading them would cost a query each pass), and
a preempted task goes back to its old place in its queue (it keeps its queue seq), so its wait
counts from its submit: the simulator's rule too (a requeued task keeps its first submit time).

Reached cloud spend caps (``apps.cloud.caps.reached_caps_now``, a reading reused for
``CLOUD_CAP_CHECK_S``) come in as ``core.SpendCap``: every autoscaled cloud pool closed to the
policies of the cap's group and its subtree.

A task's size in the snapshot is its counted size, GPUs x nodes (``apps.tasks.models.counted_milli``),
so reservation, limit, pool capacity, lending and reclaim all count every node, and the core places
it whole on one pool. A fixed-size profile with multi-node work waiting is handed to the core as
one whose sizes come from its tasks: its queue then holds sizes other than the profile's.

A pool's capacity is what IT declared, but never more than its live worker daemons have once one
serves it (``apps.pools.selectors.effective_capacity``; autoscaled cloud pools keep their declared
maximum): a pool declared at 16 GPUs whose daemons have 4 takes 4 GPUs of placements.

Anti-thrash: profiles carry their minimum runtime; a policy with a cap on preemptions per hour
carries the times of its own tasks' reclaim preemptions in the last hour (``_reclaims``).

Sharing: policies carry their lending rule, over-quota weight (milli-weights) and lendable part of
their reservation (milli-GPUs, None: all of it); profiles their starvation guard (seconds, None:
off). All are estate fields: a change reloads the estate (``apps.engine.changes``).

Time limits, dependencies and arrays (issue 35): a running task with a time limit carries its
``deadline``, its start plus the running seconds its limit leaves after earlier runs (``ran_s``).
A queued task that still waits for dependencies (``waits_on`` > 0) is not in its queue but in
``held``, with the ids of its dependencies that have not ended (one query for all of them). A task
of an array with ``max_running`` carries the array's id, and ``arrays`` caps the arrays that have
work waiting. A task's row is rewritten whenever one of these changes (a dependency's end lowers
its dependants' ``waits_on``), so the held snapshot reads them as it reads the rest of the row.
The task rows and the core's tasks built from them are ``apps.engine.task_rows``'.

Maintenance windows (issue 35): each pool carries its windows not yet over, read with the estate
(a window's write reloads it) and trimmed to those not over at each pass's time; a waiting task
carries the seconds its time limit has left (``limit_s``), which the core checks against a
window ahead.

Money budget windows (issue 37): a policy's money windows come in beside its time windows as core
budgets with rates per pool and the ledger's spend so far (``apps.engine.loader_money``); no query
when no policy has one.
"""

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from django.conf import settings

from apps.cloud.caps import reached_caps_now
from apps.cloud.models import CloudPool
from apps.core.gpus import to_milli
from apps.engine import agent_caps, core
from apps.engine.loader_money import money_budgets
from apps.engine.task_rows import Tasks, read_tasks
from apps.ledger.budgets import budget_units_used
from apps.policies.models import ComputeResource, Profile, ProfilePool, ResourcePolicy
from apps.policies.selectors import budget_windows, money_windows, parent_policy_ids
from apps.pools.models import Pool
from apps.pools.selectors import daemon_gpus, effective_capacity, windows_not_over
from apps.tasks.models import Task, TaskEvent

RECLAIM_CAP_WINDOW = timedelta(seconds=3600)


@dataclass(frozen=True)
class Loaded:
    """The snapshot, and what the applier needs to write decisions back."""

    snapshot: core.Snapshot
    verdict_keys: dict[tuple[str, int], dict[str | None, list[int]]]
    pool_names: dict[str, str]
    group_names: dict[str, str]
    # Waiting tasks an agent's GPUs-at-once cap holds out of the queues (``agent_caps``): id -> Hold.
    agent_held: dict = field(default_factory=dict)
    # The stored verdict key of each task held for its dependencies (``Snapshot.held``).
    held_keys: dict[int, str | None] = field(default_factory=dict)


def _spend_caps(reached: list, pools: list[dict], autoscaled: set[int], policies) -> tuple:
    """Each reached cloud spend cap: the autoscaled pools closed to the policies of its subtree."""
    if not reached:
        return ()
    cloud = tuple(str(p["pk"]) for p in pools if p["pk"] in autoscaled)
    if not cloud:
        return ()
    spend_caps = []
    for cap in reached:
        covered = frozenset(str(p.pk) for p in policies if cap.covers(p.group_id))
        if covered:
            spend_caps.append(core.SpendCap(f"cap:{cap.cap_id}", cloud, covered, cap.resets_at))
    return tuple(spend_caps)


@dataclass(frozen=True)
class Estate:
    """What the snapshot reads besides tasks and the per-pass readings (daemons, budget use,
    reclaims, spend caps), as the core takes it: it changes only when the estate does. Each pass
    starts from these objects and replaces only what its readings change."""

    pool_rows: list[dict]
    autoscaled: set[int]
    profile_of_resource: dict[int, int]
    policies: list
    parents: dict[int, int | None]
    windows: dict[int, dict]
    pools: tuple[core.Pool, ...]
    profiles: tuple[core.Profile, ...]
    policy_base: tuple[core.Policy, ...]
    policy_index: dict[int, int]
    resources: tuple[core.ComputeResource, ...]
    pool_names: dict[str, str]
    group_names: dict[str, str]
    # Each pool's maintenance windows that had not ended when the estate was read (pool id ->
    # windows in start order); a pass drops those ended by its own time.
    maintenance: dict[str, tuple[core.Maintenance, ...]] = field(default_factory=dict)
    # The policies with a money budget window: ``loader_money``.
    money_policies: list = field(default_factory=list)


def _ids(pairs) -> tuple[str, ...]:
    return tuple(str(pk) for *_, pk in sorted(pairs))


def load_estate(now) -> Estate:
    """The estate at ``now`` (the pass's time: maintenance windows over by then are left out)."""
    pools = list(Pool.objects.order_by("pk").values("pk", "name", "capacity", "enabled", "gpu_type_id"))
    links = list(ProfilePool.objects.values("profile_id", "pool_id", "pool_rank", "profile_rank"))
    profiles = Profile.objects.order_by("pk").values(
        "pk",
        "gpus",
        "size_from_task",
        "time_weight",
        "min_runtime_s",
        "starvation_s",
        "unlimited_before_maintenance",
    )
    resources = list(
        ComputeResource.objects.order_by("pk").values("pk", "policy_id", "profile_id", "queuing_rank")
    )
    policies = list(ResourcePolicy.objects.order_by("pk").select_related("group"))
    parents = parent_policy_ids()
    money = money_windows(policies)
    autoscaled = set(CloudPool.objects.values_list("pool_id", flat=True))
    execution = defaultdict(list)
    pool_order = defaultdict(list)
    for link in links:
        execution[link["pool_id"]].append((link["profile_rank"], link["profile_id"]))
        pool_order[link["profile_id"]].append((link["pool_rank"], link["pool_id"]))
    queuing = defaultdict(list)
    for resource in resources:
        queuing[resource["profile_id"]].append(
            (resource["queuing_rank"], resource["pk"], resource["policy_id"])
        )
    return Estate(
        pool_rows=pools,
        autoscaled=autoscaled,
        profile_of_resource={r["pk"]: r["profile_id"] for r in resources},
        policies=policies,
        parents=parents,
        windows=budget_windows(policies),
        pools=tuple(
            core.Pool(
                id=str(p["pk"]),
                capacity=to_milli(p["capacity"]),
                profiles=_ids(execution[p["pk"]]),
                enabled=p["enabled"],
            )
            for p in pools
        ),
        profiles=tuple(
            core.Profile(
                id=str(f["pk"]),
                size=to_milli(f["gpus"]),
                pools=_ids(pool_order[f["pk"]]),
                policies=tuple(str(policy) for _, _, policy in sorted(queuing[f["pk"]])),
                time_weight=to_milli(f["time_weight"]),
                size_from_task=f["size_from_task"],
                min_runtime_s=f["min_runtime_s"],
                starvation_s=f["starvation_s"],
                unlimited_before_maintenance=f["unlimited_before_maintenance"],
            )
            for f in profiles
        ),
        policy_base=tuple(
            core.Policy(
                id=str(p.pk),
                reservation=to_milli(p.reservation),
                limit=to_milli(p.limit),
                parent=str(parents[p.pk]) if parents.get(p.pk) else None,
                max_preemptions_per_hour=p.max_preemptions_per_hour,
                lending=p.lending,
                over_quota_weight=to_milli(p.over_quota_weight),
                lendable=None if p.lendable is None else to_milli(p.lendable),
            )
            for p in policies
        ),
        policy_index={p.pk: i for i, p in enumerate(policies)},
        resources=tuple(
            core.ComputeResource(id=str(r["pk"]), policy=str(r["policy_id"]), profile=str(r["profile_id"]))
            for r in resources
        ),
        pool_names={str(p["pk"]): p["name"] for p in pools},
        group_names={str(p.pk): p.group.name for p in policies},
        maintenance=_maintenance(now),
        money_policies=[p for p in policies if p.pk in money],
    )


def _maintenance(now) -> dict[str, tuple[core.Maintenance, ...]]:
    """The windows not over at ``now``, by pool (a window ended early is over)."""
    found = defaultdict(list)
    for window in windows_not_over(now):
        found[str(window.pool_id)].append(core.Maintenance(start=window.starts_at, end=window.end))
    return {pool: tuple(windows) for pool, windows in found.items()}


def _with_maintenance(pools: tuple[core.Pool, ...], maintenance: dict, now) -> tuple[core.Pool, ...]:
    return tuple(
        replace(pool, maintenance=tuple(w for w in maintenance[pool.id] if w.end > now))
        if pool.id in maintenance
        else pool
        for pool in pools
    )


def load(now) -> Loaded:
    """The whole snapshot, read afresh."""
    return assemble(now, load_estate(now), read_tasks())


def assemble(now, estate: Estate, tasks: Tasks) -> Loaded:
    """The snapshot from the estate and the tasks, with the readings taken at each pass: the
    daemons' GPUs, budget use, reclaims and reached spend caps."""
    autoscaled, policies = estate.autoscaled, estate.policies
    # Pools whose daemons are all lost or retired (None) are out of service: work placed there would
    # only come back at the claim timeout, charged meanwhile. A pool that never had a daemon keeps
    # its declared capacity, and so does an autoscaled cloud pool (its daemons come with its nodes).
    daemons = {pk: gpus for pk, gpus in daemon_gpus().items() if pk not in autoscaled}
    pools = estate.pools
    if daemons:
        pools = tuple(
            _served(pool, row["capacity"], daemons[row["pk"]]) if row["pk"] in daemons else pool
            for pool, row in zip(estate.pools, estate.pool_rows, strict=True)
        )
    if estate.maintenance:
        pools = _with_maintenance(pools, estate.maintenance, now)
    sizes_from_tasks = {str(estate.profile_of_resource[r]) for r in tasks.multi_node_resources}
    profiles = estate.profiles
    if sizes_from_tasks:
        profiles = tuple(
            replace(f, size_from_task=True) if f.id in sizes_from_tasks and not f.size_from_task else f
            for f in estate.profiles
        )
    used = budget_units_used(policies, now, estate.parents, estate.windows)
    money = {}
    if estate.money_policies:
        money = money_budgets(estate.money_policies, estate.pool_rows, now)
    reclaims = _reclaims(policies, now)
    reached = reached_caps_now(now)
    snapshot = core.Snapshot(
        now=now,
        low_watermark_s=settings.LOW_WATERMARK_S,
        pools=pools,
        profiles=profiles,
        policies=_policies(estate, used, reclaims, money),
        resources=estate.resources,
        waiting=tasks.waiting,
        placed=tasks.placed,
        caps=_spend_caps(reached, estate.pool_rows, autoscaled, policies),
        held=tasks.held,
        arrays=tasks.arrays,
    )
    group_names = dict(estate.group_names)
    group_names.update({f"cap:{cap.cap_id}": cap.group for cap in reached})
    snapshot, verdict_keys, agent_held = agent_caps.hold(snapshot, tasks.verdict_keys)
    return Loaded(
        snapshot=snapshot,
        verdict_keys=verdict_keys,
        pool_names=estate.pool_names,
        group_names=group_names,
        agent_held=agent_held,
        held_keys=tasks.held_keys,
    )


def _served(pool: core.Pool, declared, gpus) -> core.Pool:
    """A pool served by worker daemons: at most what they have, out of service when none is live."""
    if gpus is None:
        return replace(pool, enabled=False)
    return replace(pool, capacity=to_milli(effective_capacity(declared, gpus)))


def _policies(estate: Estate, used: dict, reclaims: dict, money: dict) -> tuple[core.Policy, ...]:
    """The policies with this pass's readings: budget use for those with a time or money budget,
    recent reclaims for those with a cap on preemptions; the others as the estate holds them."""
    policies = list(estate.policy_base)
    for pk in estate.windows.keys() | reclaims.keys() | money.keys():
        index = estate.policy_index[pk]
        windows = estate.windows.get(pk, {})
        policies[index] = replace(
            policies[index],
            reclaims=reclaims.get(pk, ()),
            budgets=tuple(
                core.Budget(limit=core.hours_to_units(hours), period=period, used=used[pk][period])
                for period, hours in windows.items()
            )
            + money.get(pk, ()),
        )
    return tuple(policies)


def _reclaims(policies, now) -> dict[int, tuple[datetime, ...]]:
    """For each policy with a cap on preemptions per hour, the times of the reclaim and fair-share
    preemptions of its own tasks (those of its compute resources) in the sliding hour before ``now``, oldest
    first (a stop at a time limit is no preemption, and not counted). One query on the
    ``task_event_kind_at_idx`` range; none when no policy has a cap."""
    capped = [p.pk for p in policies if p.max_preemptions_per_hour is not None]
    if not capped:
        return {}
    rows = (
        TaskEvent.objects.filter(
            kind=TaskEvent.Kind.PREEMPTED,
            reason__in=(Task.StopReason.RECLAIM, Task.StopReason.FAIR_SHARE),
            at__gt=now - RECLAIM_CAP_WINDOW,
            at__lte=now,
            task__compute_resource__policy_id__in=capped,
        )
        .order_by("at", "pk")
        .values_list("task__compute_resource__policy_id", "at")
    )
    times = defaultdict(list)
    for policy_id, at in rows:
        times[policy_id].append(at)
    return {policy_id: tuple(at) for policy_id, at in times.items()}
