"""Issue 37 part 4, lost work in the database: a running task's checkpoint (``record_checkpoint``,
refused in the future or before its run's start) and the GPU-hours each preemption loses, stored
on its ``preempted`` event: GPUs x (stop - the later of the last checkpoint and the run's start)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from apps.tasks import services as lifecycle
from apps.tasks.models import Task, TaskEvent
from tests.tasks.test_lifecycle_bulk_writes import T0, Estate, loaded, place

pytestmark = pytest.mark.django_db

H = timedelta(hours=1)


@pytest.fixture
def estate():
    return Estate()


def running(estate, n: int) -> list[Task]:
    """n tasks (1, 2, 3 GPUs ...) placed at T0 on alternate pools, claimed and started at T0."""
    ids = estate.submit(n)
    tasks = place(estate, ids)
    for worker in estate.workers:
        lifecycle.claim_many(worker, [t for t in tasks if t.pool_id == worker.pool_id], T0)
    for task in loaded(ids):
        lifecycle.mark_started(task, T0)
    return loaded(ids)


def lost_on_preemption(ids) -> list[Decimal]:
    rows = TaskEvent.objects.filter(task_id__in=ids, kind="preempted").order_by("task_id")
    return [e.lost_gpu_hours for e in rows]


def test_lost_work_a_preemption_records_gpus_times_the_time_since_the_last_checkpoint(estate):
    """Rule: 1 GPU checkpointed 30 min after its start, 2 GPUs never, preempted 2 h after the start:
    1 x 1.5 h and 2 x 2 h lost; a preemption for any reason records it."""
    one, two = running(estate, 2)
    lifecycle.record_checkpoint(one, T0 + H / 2, now=T0 + H)
    lifecycle.request_stop_many(loaded([one.pk, two.pk]), Task.StopReason.FAIR_SHARE, T0 + 2 * H)
    assert lost_on_preemption([one.pk, two.pk]) == [Decimal("1.5"), Decimal("4")]
    assert Task.objects.get(pk=one.pk).checkpointed_at == T0 + H / 2


def test_lost_work_unstarted_work_loses_nothing_and_a_cancel_records_none(estate):
    ids = estate.submit(2)
    place(estate, ids)
    lifecycle.request_stop_many(loaded(ids[:1]), Task.StopReason.RECLAIM, T0 + H)
    lifecycle.request_stop_many(loaded(ids[1:]), Task.StopReason.CANCELED, T0 + H)
    assert lost_on_preemption(ids) == [Decimal(0)]
    assert TaskEvent.objects.get(task_id=ids[1], kind="cancel_requested").lost_gpu_hours is None


def test_lost_work_a_lost_worker_counts_until_the_charged_end(estate):
    """Rule: work requeued because its worker was lost loses what ran until ``ended_at``."""
    [task] = running(estate, 1)
    lifecycle.requeue_lost([task], Task.StopReason.WORKER_LOST, T0 + 3 * H, ended_at=T0 + H)
    assert lost_on_preemption([task.pk]) == [Decimal("1")]


def test_lost_work_an_older_checkpoint_of_an_earlier_run_counts_from_this_runs_start(estate):
    [task] = running(estate, 1)
    Task.objects.filter(pk=task.pk).update(checkpointed_at=T0 - H)
    lifecycle.request_stop_many(loaded([task.pk]), Task.StopReason.PRIORITY, T0 + H / 4)
    assert lost_on_preemption([task.pk]) == [Decimal("0.25")]


def test_checkpoint_refused_in_the_future_before_the_run_or_when_not_running(estate):
    """Rule: a checkpoint in the future or before the current run's start is refused on ``at``;
    a task with no run going is refused on ``task``; an older checkpoint changes nothing."""
    [task] = running(estate, 1)
    with pytest.raises(ValidationError) as future:
        lifecycle.record_checkpoint(task, T0 + 2 * H, now=T0 + H)
    assert "future" in future.value.message_dict["at"][0]
    with pytest.raises(ValidationError) as before:
        lifecycle.record_checkpoint(task, T0 - H, now=T0 + H)
    assert "run's start" in before.value.message_dict["at"][0]
    lifecycle.record_checkpoint(task, T0 + H, now=T0 + H)
    lifecycle.record_checkpoint(task, T0 + H / 2, now=T0 + H)
    assert Task.objects.get(pk=task.pk).checkpointed_at == T0 + H
    [waiting] = loaded(estate.submit(1))
    with pytest.raises(ValidationError) as idle:
        lifecycle.record_checkpoint(waiting, T0, now=T0 + H)
    assert "only running work" in idle.value.message_dict["task"][0]
