"""Checkpoints reported by running work (through its worker daemon or the API) and the work a
preemption loses: GPUs x (stop - the later of the last checkpoint and the run's start)."""

from datetime import datetime, timedelta
from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db.models import Q

from apps.tasks.models import Task

LOST_PLACES = Decimal("0.000001")
US_PER_HOUR = Decimal(3_600_000_000)
_US = timedelta(microseconds=1)


def record_checkpoint(task: Task, at: datetime, *, now: datetime) -> Task:
    """The task's work checkpointed at ``at``. Refused (ValidationError naming the field) for a
    task with no run going, a time in the future or before its current run's start. A checkpoint
    older than the one already recorded changes nothing (a retried report)."""
    if task.state not in (Task.State.RUNNING, Task.State.STOPPING) or task.started_at is None:
        raise ValidationError({"task": f"Task {task.pk} is {task.state}: only running work checkpoints."})
    if at > now:
        raise ValidationError({"at": f"A checkpoint cannot be in the future (now is {now.isoformat()})."})
    if at < task.started_at:
        raise ValidationError(
            {"at": f"A checkpoint cannot be before its run's start ({task.started_at.isoformat()})."}
        )
    newer = Q(checkpointed_at__isnull=True) | Q(checkpointed_at__lt=at)
    if Task.objects.filter(newer, pk=task.pk).update(checkpointed_at=at):
        task.checkpointed_at = at
    return task


def lost_gpu_hours(task: Task, stop: datetime) -> Decimal:
    """The GPU-hours a run stopped at ``stop`` loses: nothing before it started; a session counts
    too (it loses its state)."""
    if task.started_at is None:
        return Decimal(0).quantize(LOST_PLACES)
    saved = task.started_at
    if task.checkpointed_at is not None and task.checkpointed_at > saved:
        saved = task.checkpointed_at
    micros = max(0, (stop - saved) // _US)
    return (task.counted_gpus * micros / US_PER_HOUR).quantize(LOST_PLACES)
