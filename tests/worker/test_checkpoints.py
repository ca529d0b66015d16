"""Issue 37 part 4: running work reports a checkpoint to its daemon by touching
``$KLIQUE_CHECKPOINT_MARK``; the daemon sends it (a ``checkpoint`` report) and the task's
``checkpointed_at`` takes the file's time, so a later preemption counts the work lost since."""

from decimal import Decimal

import pytest
from django.utils import timezone

from apps.tasks import services as lifecycle
from apps.tasks.models import Task, TaskEvent
from tests.worker.conftest import run_until

pytestmark = pytest.mark.django_db


def test_checkpoint_a_touched_mark_reaches_the_task_and_bounds_its_lost_work(make_daemon, pool, place):
    daemon = make_daemon()
    (task,) = place(pool)
    command = 'touch "$KLIQUE_CHECKPOINT_MARK"; while true; do sleep 0.05; done'
    Task.objects.filter(pk=task.pk).update(command=command)
    run_until(daemon, lambda: Task.objects.get(pk=task.pk).checkpointed_at is not None)
    task.refresh_from_db()
    assert task.state == Task.State.RUNNING and task.checkpointed_at >= task.started_at
    stop = timezone.now()
    lifecycle.request_stop_many([task], Task.StopReason.RECLAIM, stop)
    event = TaskEvent.objects.get(task=task, kind="preempted")
    assert event.lost_gpu_hours == lifecycle.lost_gpu_hours(task, stop)
    assert event.lost_gpu_hours < Decimal("0.01")
    run_until(daemon, lambda: Task.objects.get(pk=task.pk).state == Task.State.QUEUED)
