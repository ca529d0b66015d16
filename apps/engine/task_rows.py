"""The task rows of the engine's snapshot: one shape for the whole load (``apps.engine.loader``)
and for the held snapshot's changed rows (``apps.engine.held``), and the core's tasks built from
them. See the loader's docstring for what each field means.
"""

from collections import defaultdict
from collections.abc import Collection
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import BigIntegerField, F, Func
from django.db.models.fields.json import KT
from django.db.models.functions import Coalesce

from apps.engine import core
from apps.tasks.models import Task, TaskDependency, counted_milli
from apps.tasks.selectors import with_queue_rank

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class EpochMicros(Func):
    """A timestamp as integer microseconds since the epoch, computed by PostgreSQL: parsing tens
    of thousands of timestamps in Python costs more than the rest of the load."""

    template = "CAST(EXTRACT(EPOCH FROM %(expressions)s) * 1000000 AS BIGINT)"
    output_field = BigIntegerField()


def _instant(field: str | Coalesce):
    expression = F(field) if isinstance(field, str) else field
    return EpochMicros(expression) if connection.vendor == "postgresql" else expression


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
class Tasks:
    """The waiting and placed tasks as the core takes them, with what the applier needs."""

    waiting: dict[str, tuple[core.WaitingTask, ...]]
    verdict_keys: dict[tuple[str, int], dict[str | None, Collection[int]]]
    multi_node_resources: Collection[int]
    placed: tuple[core.PlacedTask, ...]
    held: tuple[core.HeldTask, ...] = ()
    held_keys: dict[int, str | None] = field(default_factory=dict)
    arrays: dict[str, int] = field(default_factory=dict)


# The task rows, as (id, state, compute resource, pool, counted milli-GPUs, queue rank, placed at,
# verdict key, nodes, priority, submitted at, time limit, ran seconds, started at, unended
# dependencies, array, array's max_running, last checkpoint): one shape for the whole load and for
# the held snapshot's changed rows.
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
    "time_limit_s",
    "ran_s",
    "started",
    "waits_on",
    "array_id",
    "array_cap",
    "checkpointed",
)


def task_rows(queryset, *order: str) -> list[tuple]:
    annotated = with_queue_rank(queryset).annotate(
        milli=counted_milli(),
        instant=_instant("placed_at"),
        key=KT("verdict__key"),
        since=_instant(Coalesce("released_at", "submitted_at")),
        started=_instant("started_at"),
        array_cap=F("array__max_running"),
        checkpointed=_instant("checkpointed_at"),
    )
    return _rows(annotated.order_by(*order), TASK_COLUMNS)


def capped_array(row) -> str | None:
    """The id of the task's array when the array caps its running tasks."""
    return str(row[15]) if row[16] is not None else None


def is_held(row) -> bool:
    """A queued task that still waits for some of its dependencies to end."""
    return row[14] > 0


def waiting_task(row) -> core.WaitingTask:
    return core.WaitingTask(
        id=str(row[0]),
        seq=row[5],
        size=row[4],
        priority=row[9],
        since=_as_datetime(row[10]),
        array=capped_array(row),
        limit_s=None if row[11] is None else max(0, row[11] - row[12]),
    )


def held_task(row, waits_for: tuple[str, ...]) -> core.HeldTask:
    return core.HeldTask(id=str(row[0]), resource=str(row[2]), seq=row[5], waits_for=waits_for)


def _deadline(row) -> datetime | None:
    """When a running (or stopping) task reaches its time limit: its start plus what earlier runs
    left of it. The core reads a stopping task's to know whether it returns to its queue."""
    if row[11] is None or row[13] is None or row[1] == Task.State.PLACED:
        return None
    return _as_datetime(row[13]) + timedelta(seconds=row[11] - row[12])


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
        deadline=_deadline(row),
        array=capped_array(row),
        saved_at=_saved_at(row),
    )


def _saved_at(row) -> datetime | None:
    """When a running task's work was last saved: its last checkpoint in this run, else the run's
    start; before it starts, ``core.NOT_STARTED`` (a preemption then loses nothing, as recorded)."""
    if row[13] is None:
        return core.NOT_STARTED
    started = _as_datetime(row[13])
    if row[17] is None:
        return started
    return max(started, _as_datetime(row[17]))


def waits_for(task_ids) -> dict[int, tuple[str, ...]]:
    """The dependencies of each of ``task_ids`` that have not ended (ids as strings, in id order),
    in one query."""
    if not task_ids:
        return {}
    rows = (
        TaskDependency.objects.filter(task_id__in=list(task_ids))
        .exclude(needs__state__in=Task.FINAL_STATES)
        .order_by("task_id", "needs_id")
        .values_list("task_id", "needs_id")
    )
    found: dict[int, list[str]] = defaultdict(list)
    for task_id, needs_id in rows:
        found[task_id].append(str(needs_id))
    return {task_id: tuple(ids) for task_id, ids in found.items()}


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


def held_order(row) -> tuple:
    """The order of ``Snapshot.held``: as a queue's (``waiting_order``)."""
    return waiting_order(row)


def read_tasks() -> Tasks:
    """The queues in queue order (higher priority first, then queue rank) and work on pools in
    placement order (a task being stopped is marked ``preempting``), read in two queries; the
    tasks held for their dependencies, with those dependencies, in one more when there are any.

    Sizes come out of the database as integer milli-GPUs and verdicts as their short key, so that
    tens of thousands of waiting tasks load without building a Decimal or a JSON document each."""
    queued_rows = task_rows(
        Task.objects.filter(state=Task.State.QUEUED), "compute_resource_id", "-priority", "queue_rank", "pk"
    )
    placed_rows = task_rows(
        Task.objects.filter(state__in=Task.ACTIVE_STATES), "placed_at", "queue_rank", "pk"
    )
    waiting_rows = [row for row in queued_rows if not is_held(row)]
    held_rows = [row for row in queued_rows if is_held(row)]
    queues: dict[str, list[core.WaitingTask]] = defaultdict(list)
    arrays: dict[str, int] = {}
    for row in waiting_rows:
        queues[str(row[2])].append(waiting_task(row))
        if row[16] is not None:
            arrays[str(row[15])] = row[16]
    keys, multi_node = verdict_groups(waiting_rows)
    needs = waits_for([row[0] for row in held_rows])
    return Tasks(
        waiting={resource: tuple(queue) for resource, queue in queues.items()},
        verdict_keys=keys,
        multi_node_resources=multi_node,
        placed=tuple(placed_task(row) for row in placed_rows),
        held=tuple(held_task(row, needs.get(row[0], ())) for row in held_rows),
        held_keys={row[0]: row[7] for row in held_rows},
        arrays=arrays,
    )
