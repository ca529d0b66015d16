"""Writes to the usage ledger: an interval opens when a task is placed and closes when its work
has really stopped. Nothing else writes intervals."""

from collections.abc import Iterable
from datetime import datetime

from django.db.models import F

from apps.ledger.models import UsageInterval


def open_intervals(tasks: Iterable, at: datetime) -> list[UsageInterval]:
    """Open one interval per placed task, of its counted GPUs (GPUs x nodes). Each task must come
    with ``compute_resource__policy``, ``compute_resource__profile`` and ``pool`` loaded (the
    engine's loader does so)."""
    intervals = [
        UsageInterval(
            task_id=task.pk,
            user_id=task.user_id,
            project_id=task.project_id,
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
    return UsageInterval.objects.bulk_create(intervals)


def close_intervals(task_ids: Iterable[int], at: datetime) -> int:
    """Close the open interval of each task at ``at``, or at its start if ``at`` is earlier
    (a worker's last heartbeat can precede a placement made since)."""
    ids = list(task_ids)
    if not ids:
        return 0
    open_ones = UsageInterval.objects.filter(task_id__in=ids, end__isnull=True)
    closed = open_ones.filter(start__lte=at).update(end=at)
    return closed + open_ones.filter(start__gt=at).update(end=F("start"))


def claim_intervals(task_ids: Iterable[int], worker) -> int:
    """Name ``worker`` on the open interval of each task it claimed (one update): the interval
    keeps its worker after the task is requeued, so a node's busy time outlives the task's move."""
    ids = list(task_ids)
    if not ids:
        return 0
    return UsageInterval.objects.filter(task_id__in=ids, end__isnull=True).update(worker=worker)
