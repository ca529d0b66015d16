"""The task lifecycle: placement opens a usage interval, a stop closes it when the work has really
stopped, and a preempted task goes back to its old place in the queue."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.ledger.models import UsageInterval
from apps.tasks import selectors, services
from apps.tasks.models import Task, TaskEvent
from tests.factories import ComputeResourceFactory, PoolFactory, UserFactory, WorkerFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


def listed_resource():
    """A compute resource whose profile lists a pool (a profile listing none is refused at submit)."""
    resource = ComputeResourceFactory()
    resource.profile.pools.add(PoolFactory())
    return resource


@pytest.fixture
def resource():
    return listed_resource()


def submit(resource, n=1):
    user = UserFactory()
    return [services.submit(user=user, compute_resource=resource, command=f"job {i}") for i in range(n)]


def loaded(task):
    return Task.objects.select_related("compute_resource__policy", "compute_resource__profile", "pool").get(
        pk=task.pk
    )


def test_placement_opens_one_interval_at_placement_time(resource):
    (task,) = submit(resource)
    pool = PoolFactory()
    services.place_many([(loaded(task), pool)], T0)
    task.refresh_from_db()
    assert task.state == Task.State.PLACED and task.pool == pool and task.placed_at == T0
    interval = UsageInterval.objects.get(task=task)
    assert (interval.start, interval.end, interval.gpus, interval.pool) == (T0, None, task.gpus, pool)
    assert interval.policy == resource.policy and interval.group == resource.policy.group


def test_a_stop_of_unclaimed_work_requeues_it_at_once_in_its_old_place(resource):
    first, second = submit(resource, 2)
    pool = PoolFactory()
    services.place_many([(loaded(first), pool)], T0)
    services.request_stop_many([loaded(first)], Task.StopReason.RECLAIM, T0 + timedelta(seconds=30))
    first.refresh_from_db()
    assert first.state == Task.State.QUEUED and first.pool is None
    assert first.preemption_count == 1 and first.last_preemption_reason == "reclaim"
    assert UsageInterval.objects.get(task=first).end == T0 + timedelta(seconds=30)
    assert selectors.queue_position(first) == 1 and selectors.queue_position(second) == 2
    kinds = list(first.events.order_by("pk").values_list("kind", "reason"))
    assert kinds[-2:] == [(TaskEvent.Kind.PREEMPTED, "reclaim"), (TaskEvent.Kind.REQUEUED, "reclaim")]


def test_a_stop_of_claimed_work_waits_for_the_worker(resource):
    (task,) = submit(resource)
    pool = PoolFactory()
    services.place_many([(loaded(task), pool)], T0)
    task = loaded(task)
    task.worker = WorkerFactory(pool=pool)
    task.save()
    services.request_stop_many([task], Task.StopReason.BUDGET, T0 + timedelta(minutes=1))
    task.refresh_from_db()
    assert task.state == Task.State.STOPPING
    assert UsageInterval.objects.get(task=task).end is None
    services.stopped_many([task], T0 + timedelta(minutes=2))
    task.refresh_from_db()
    assert task.state == Task.State.QUEUED
    assert UsageInterval.objects.get(task=task).end == T0 + timedelta(minutes=2)


def test_cancel_while_waiting_or_placed(resource):
    waiting, placed = submit(resource, 2)
    services.place_many([(loaded(placed), PoolFactory())], T0)
    services.cancel(waiting, at=T0)
    services.cancel(placed, at=T0 + timedelta(seconds=5))
    waiting.refresh_from_db()
    placed.refresh_from_db()
    assert waiting.state == placed.state == Task.State.CANCELED
    assert UsageInterval.objects.get(task=placed).end == T0 + timedelta(seconds=5)
    assert placed.preemption_count == 0


def test_finish_closes_the_interval_and_records_the_exit(resource):
    (task,) = submit(resource)
    services.place_many([(loaded(task), PoolFactory())], T0)
    services.finish(loaded(task), exit_code=3, at=T0 + timedelta(hours=1))
    task.refresh_from_db()
    assert task.state == Task.State.FAILED and task.exit_code == 3
    assert UsageInterval.objects.get(task=task).end == T0 + timedelta(hours=1)


def test_lost_work_is_charged_only_until_the_given_time(resource):
    (task,) = submit(resource)
    services.place_many([(loaded(task), PoolFactory())], T0)
    services.requeue_lost(
        [loaded(task)],
        Task.StopReason.WORKER_LOST,
        T0 + timedelta(minutes=5),
        ended_at=T0 + timedelta(minutes=2),
    )
    task.refresh_from_db()
    assert task.state == Task.State.QUEUED and task.last_preemption_reason == "worker_lost"
    assert UsageInterval.objects.get(task=task).end == T0 + timedelta(minutes=2)


def test_a_task_cannot_be_placed_twice(resource):
    (task,) = submit(resource)
    services.place_many([(loaded(task), PoolFactory())], T0)
    with pytest.raises(ValueError):
        services.place_many([(loaded(task), PoolFactory())], T0)


def test_positions_follow_seq_per_compute_resource(resource):
    tasks = submit(resource, 3)
    other = submit(listed_resource(), 1)
    positions = selectors.queue_positions(tasks + other)
    assert [positions[t.pk] for t in tasks] == [1, 2, 3]
    assert positions[other[0].pk] == 1
