"""Reads of tasks and queues."""

from django.db.models import F, Window
from django.db.models.functions import RowNumber

from apps.tasks.models import Task


def waiting_with_positions(queryset=None):
    """Waiting tasks annotated with ``position``: 1-based place in their compute resource's queue."""
    waiting = Task.objects.filter(state=Task.State.QUEUED)
    ranked = waiting.annotate(
        position=Window(RowNumber(), partition_by=[F("compute_resource_id")], order_by=[F("queue_seq").asc()])
    )
    if queryset is None:
        return ranked
    ids = queryset.filter(state=Task.State.QUEUED).values("pk")
    return ranked.filter(pk__in=ids)


def queue_position(task: Task) -> int | None:
    if task.state != Task.State.QUEUED:
        return None
    ahead = Task.objects.filter(
        state=Task.State.QUEUED, compute_resource_id=task.compute_resource_id, queue_seq__lt=task.queue_seq
    ).count()
    return ahead + 1
