"""Load the engine core's snapshot from the database in a fixed number of queries.

Ids in the snapshot are the database primary keys as strings. A task's seq in the snapshot is its
queue rank (project priority, then queue seq: ``apps.tasks.selectors.with_queue_rank``) and its
priority is the task's own (``Task.priority``). Queues come out of the database already in queue
order, higher task priority first and then the queue rank, and placed work in placement order, as
the core expects.

A waiting task's ``since`` is its ``submitted_at``. The task table keeps no time of its last
requeue (only its events do, and reading them would cost a query each pass), and a preempted task
goes back to its old place in its queue (it keeps its queue seq), so its wait counts from its
submit: the simulator's rule too (a requeued task keeps its first submit time).

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
"""

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import BigIntegerField, F, Func
from django.db.models.fields.json import KT

from apps.cloud.caps import reached_caps_now
from apps.cloud.models import CloudPool
from apps.core.gpus import to_milli
from apps.engine import agent_caps, core
from apps.ledger.budgets import budget_units_used
from apps.policies.models import ComputeResource, Profile, ProfilePool, ResourcePolicy
from apps.policies.selectors import budget_windows, parent_policy_ids
from apps.pools.models import Pool
from apps.pools.selectors import daemon_gpus, effective_capacity
from apps.tasks.models import Task, TaskEvent, counted_milli
from apps.tasks.selectors import with_queue_rank

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
RECLAIM_CAP_WINDOW = timedelta(seconds=3600)


class EpochMicros(Func):
    """A timestamp as integer microseconds since the epoch, computed by PostgreSQL: parsing tens
    of thousands of timestamps in Python costs more than the rest of the load."""

    template = "CAST(EXTRACT(EPOCH FROM %(expressions)s) * 1000000 AS BIGINT)"
    output_field = BigIntegerField()


def _instant(field: str):
    return EpochMicros(F(field)) if connection.vendor == "postgresql" else F(field)


def _as_datetime(value) -> datetime:
    return value if isinstance(value, datetime) else EPOCH + timedelta(microseconds=value)


def _rows(queryset, names: tuple[str, ...]):
    """The rows of a values() query as tuples in the order of ``names``.

    On PostgreSQL the ORM's SQL runs on a plain cursor: the columns are already plain ints and
    strings, and skipping Django's per-value converters halves the load of a large queue."""
    if connection.vendor != "postgresql":
        return list(queryset.values_list(*names))
    sql, params = queryset.values(*names).query.sql_with_params()
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        columns = [column.name for column in cursor.description]
        order = [columns.index(name) for name in names]
        if order == list(range(len(names))):
            return cursor.fetchall()
        return [tuple(row[i] for i in order) for row in cursor.fetchall()]


@dataclass(frozen=True)
class Loaded:
    """The snapshot, and what the applier needs to write decisions back."""

    snapshot: core.Snapshot
    verdict_keys: dict[tuple[str, int], dict[str | None, list[int]]]
    pool_names: dict[str, str]
    group_names: dict[str, str]
    # Waiting tasks an agent's GPUs-at-once cap holds out of the queues (``agent_caps``): id -> Hold.
    agent_held: dict = field(default_factory=dict)


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


def _ids(pairs) -> tuple[str, ...]:
    return tuple(str(pk) for *_, pk in sorted(pairs))


def load_estate() -> Estate:
    pools = list(Pool.objects.order_by("pk").values("pk", "name", "capacity", "enabled"))
    links = list(ProfilePool.objects.values("profile_id", "pool_id", "pool_rank", "profile_rank"))
    profiles = Profile.objects.order_by("pk").values(
        "pk", "gpus", "size_from_task", "time_weight", "min_runtime_s", "starvation_s"
    )
    resources = list(
        ComputeResource.objects.order_by("pk").values("pk", "policy_id", "profile_id", "queuing_rank")
    )
    policies = list(ResourcePolicy.objects.order_by("pk").select_related("group"))
    parents = parent_policy_ids()
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
        autoscaled=set(CloudPool.objects.values_list("pool_id", flat=True)),
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
    )


@dataclass(frozen=True)
class Tasks:
    """The waiting and placed tasks as the core takes them, with what the applier needs."""

    waiting: dict[str, tuple[core.WaitingTask, ...]]
    verdict_keys: dict[tuple[str, int], dict[str | None, Collection[int]]]
    multi_node_resources: Collection[int]
    placed: tuple[core.PlacedTask, ...]


def load(now) -> Loaded:
    """The whole snapshot, read afresh."""
    return assemble(now, load_estate(), _tasks())


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
    sizes_from_tasks = {str(estate.profile_of_resource[r]) for r in tasks.multi_node_resources}
    profiles = estate.profiles
    if sizes_from_tasks:
        profiles = tuple(
            replace(f, size_from_task=True) if f.id in sizes_from_tasks and not f.size_from_task else f
            for f in estate.profiles
        )
    used = budget_units_used(policies, now, estate.parents, estate.windows)
    reclaims = _reclaims(policies, now)
    reached = reached_caps_now(now)
    snapshot = core.Snapshot(
        now=now,
        low_watermark_s=settings.LOW_WATERMARK_S,
        pools=pools,
        profiles=profiles,
        policies=_policies(estate, used, reclaims),
        resources=estate.resources,
        waiting=tasks.waiting,
        placed=tasks.placed,
        caps=_spend_caps(reached, estate.pool_rows, autoscaled, policies),
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
    )


def _served(pool: core.Pool, declared, gpus) -> core.Pool:
    """A pool served by worker daemons: at most what they have, out of service when none is live."""
    if gpus is None:
        return replace(pool, enabled=False)
    return replace(pool, capacity=to_milli(effective_capacity(declared, gpus)))


def _policies(estate: Estate, used: dict, reclaims: dict) -> tuple[core.Policy, ...]:
    """The policies with this pass's readings: budget use for those with a time budget, recent
    reclaims for those with a cap on preemptions; the others as the estate holds them."""
    policies = list(estate.policy_base)
    for pk in estate.windows.keys() | reclaims.keys():
        index = estate.policy_index[pk]
        windows = estate.windows.get(pk, {})
        policies[index] = replace(
            policies[index],
            reclaims=reclaims.get(pk, ()),
            budgets=tuple(
                core.Budget(limit=core.hours_to_units(hours), period=period, used=used[pk][period])
                for period, hours in windows.items()
            ),
        )
    return tuple(policies)


def _reclaims(policies, now) -> dict[int, tuple[datetime, ...]]:
    """For each policy with a cap on preemptions per hour, the times of the reclaim and fair-share
    preemptions of its own tasks (those of its compute resources) in the sliding hour before ``now``, oldest
    first. One query on the ``task_event_kind_at_idx`` range; none when no policy has a cap."""
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


# The task rows, as (id, state, compute resource, pool, counted milli-GPUs, queue rank, placed at,
# verdict key, nodes, priority, submitted at): one shape for the whole load and for the held
# snapshot's changed rows.
TASK_COLUMNS = (
    "id",
    "state",
    "compute_resource_id",
    "pool_id",
    "milli",
    "queue_rank",
    "instant",
    "key",
    "nodes",
    "priority",
    "since",
)


def task_rows(queryset, *order: str) -> list[tuple]:
    annotated = with_queue_rank(queryset).annotate(
        milli=counted_milli(),
        instant=_instant("placed_at"),
        key=KT("verdict__key"),
        since=_instant("submitted_at"),
    )
    return _rows(annotated.order_by(*order), TASK_COLUMNS)


def waiting_task(row) -> core.WaitingTask:
    return core.WaitingTask(
        id=str(row[0]), seq=row[5], size=row[4], priority=row[9], since=_as_datetime(row[10])
    )


def placed_task(row) -> core.PlacedTask:
    return core.PlacedTask(
        id=str(row[0]),
        resource=str(row[2]),
        pool=str(row[3]),
        size=row[4],
        seq=row[5],
        placed_at=_as_datetime(row[6]),
        preempting=row[1] == Task.State.STOPPING,
        priority=row[9],
    )


def placed_order(row) -> tuple:
    """Placement order: placed first, then queue rank, then id (the database's order too)."""
    return (row[6], row[5], row[0])


def waiting_order(row) -> tuple:
    """Queue order: compute resource, higher priority first, queue rank, id (the database's too)."""
    return (row[2], -row[9], row[5], row[0])


def verdict_groups(rows) -> tuple[dict, set[int]]:
    """The waiting tasks of each (compute resource, counted size) by the key of their stored
    verdict (the applier writes only the tasks whose key differs from the new verdict's, without
    reading them again), and the compute resources with multi-node work waiting."""
    keys: dict[tuple[str, int], dict[str | None, list[int]]] = defaultdict(dict)
    multi_node = set()
    for row in rows:
        keys[(str(row[2]), row[4])].setdefault(row[7], []).append(row[0])
        if row[8] > 1:
            multi_node.add(row[2])
    return dict(keys), multi_node


def _tasks() -> Tasks:
    """The queues in queue order (higher priority first, then queue rank) and work on pools in
    placement order (a task being stopped is marked ``preempting``), read in two queries.

    Sizes come out of the database as integer milli-GPUs and verdicts as their short key, so that
    tens of thousands of waiting tasks load without building a Decimal or a JSON document each."""
    waiting_rows = task_rows(
        Task.objects.filter(state=Task.State.QUEUED), "compute_resource_id", "-priority", "queue_rank", "pk"
    )
    placed_rows = task_rows(
        Task.objects.filter(state__in=Task.ACTIVE_STATES), "placed_at", "queue_rank", "pk"
    )
    queues: dict[str, list[core.WaitingTask]] = defaultdict(list)
    for row in waiting_rows:
        queues[str(row[2])].append(waiting_task(row))
    keys, multi_node = verdict_groups(waiting_rows)
    return Tasks(
        waiting={resource: tuple(queue) for resource, queue in queues.items()},
        verdict_keys=keys,
        multi_node_resources=multi_node,
        placed=tuple(placed_task(row) for row in placed_rows),
    )
