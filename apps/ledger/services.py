"""Writes to the usage ledger: an interval opens when a task is placed and closes when its work
has really stopped. Nothing else writes intervals."""

from collections.abc import Iterable
from datetime import datetime

from django.db import connection
from django.db.models import F

from apps.core.sql import array_literal
from apps.ledger.models import UsageInterval


def open_intervals(tasks: Iterable, at: datetime) -> int:
    """Open one interval per placed task, of its counted GPUs (GPUs x nodes). Each task must come
    with ``compute_resource__policy``, ``compute_resource__profile`` and ``pool`` loaded (the
    engine's loader does so). Returns how many were opened.

    On PostgreSQL one ``INSERT ... SELECT FROM unnest(...)`` whatever the number of tasks, fed from
    the loaded tasks; elsewhere a bulk insert of the same rows."""
    tasks = list(tasks)
    if not tasks:
        return 0
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                """
                INSERT INTO ledger_usageinterval (task_id, user_id, project_id, agent_id, policy_id,
                    group_id, compute_resource_id, pool_id, worker_id, gpu_type_id, gpus, time_weight,
                    start, "end")
                SELECT u.task, u.usr, u.project, u.agent, u.policy, u.grp, u.resource, u.pool, NULL,
                    u.gpu_type, u.gpus, u.weight, %s, NULL
                FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[],
                    %s::bigint[], %s::bigint[], %s::bigint[], %s::bigint[], %s::numeric[], %s::numeric[])
                    WITH ORDINALITY AS u(task, usr, project, agent, policy, grp, resource, pool, gpu_type,
                    gpus, weight, n)
                ORDER BY u.n
                """,
                [
                    at,
                    array_literal(t.pk for t in tasks),
                    array_literal(t.user_id for t in tasks),
                    array_literal(t.project_id for t in tasks),
                    array_literal(t.agent_id for t in tasks),
                    array_literal(t.compute_resource.policy_id for t in tasks),
                    array_literal(t.compute_resource.policy.group_id for t in tasks),
                    array_literal(t.compute_resource_id for t in tasks),
                    array_literal(t.pool_id for t in tasks),
                    array_literal(t.pool.gpu_type_id for t in tasks),
                    array_literal(t.counted_gpus for t in tasks),
                    array_literal(t.compute_resource.profile.time_weight for t in tasks),
                ],
            )
            return cursor.rowcount
    intervals = [
        UsageInterval(
            task_id=task.pk,
            user_id=task.user_id,
            project_id=task.project_id,
            agent_id=task.agent_id,
            policy_id=task.compute_resource.policy_id,
            group_id=task.compute_resource.policy.group_id,
            compute_resource_id=task.compute_resource_id,
            pool_id=task.pool_id,
            gpu_type_id=task.pool.gpu_type_id,
            gpus=task.counted_gpus,
            time_weight=task.compute_resource.profile.time_weight,
            start=at,
        )
        for task in tasks
    ]
    return len(UsageInterval.objects.bulk_create(intervals))


def close_intervals(task_ids: Iterable[int], at: datetime) -> int:
    """Close the open interval of each task at ``at``, or at its start if ``at`` is earlier
    (a worker's last heartbeat can precede a placement made since). On PostgreSQL one statement
    (``GREATEST``), elsewhere two."""
    ids = list(task_ids)
    if not ids:
        return 0
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                'UPDATE ledger_usageinterval SET "end" = GREATEST(start, %s) '
                'WHERE task_id = ANY(%s::bigint[]) AND "end" IS NULL',
                [at, array_literal(ids)],
            )
            return cursor.rowcount
    open_ones = UsageInterval.objects.filter(task_id__in=ids, end__isnull=True)
    closed = open_ones.filter(start__lte=at).update(end=at)
    return closed + open_ones.filter(start__gt=at).update(end=F("start"))


def claim_intervals(task_ids: Iterable[int], worker) -> int:
    """Name ``worker`` on the open interval of each task it claimed (one update): the interval
    keeps its worker after the task is requeued, so a node's busy time outlives the task's move."""
    ids = list(task_ids)
    if not ids:
        return 0
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE ledger_usageinterval SET worker_id = %s "
                'WHERE task_id = ANY(%s::bigint[]) AND "end" IS NULL',
                [worker.pk, array_literal(ids)],
            )
            return cursor.rowcount
    return UsageInterval.objects.filter(task_id__in=ids, end__isnull=True).update(worker=worker)
