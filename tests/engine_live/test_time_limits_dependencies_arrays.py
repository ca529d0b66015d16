"""Issue 35 on the database: time limits (a running task past its limit is stopped, not preempted,
and ends timed out), dependencies (a task waits with verdict ``dependency`` and is placed once its
dependencies succeed; an ``after_ok`` on a task that did not succeed cancels the chain) and arrays
(``max_running`` caps the array's placed tasks at every pass, verdict ``array_limit``). The
incremental snapshot stays the one a full load reads through all of it (on PostgreSQL with
``-m postgres``: ``test_held_snapshot.py`` and the last test here)."""

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from apps.accounts.models import Notification
from apps.engine import held, loader, services
from apps.engine.verdict_words import dependency_key
from apps.policies import services as policies
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.engine_live.test_held_snapshot import assert_held_is_fresh
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory, WorkerFactory

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)


@pytest.fixture
def resource():
    pool = PoolFactory(name="onprem", capacity=8)
    profile = ProfileFactory(name="gpu-1", gpus=1)
    policies.link_pool(profile, pool)
    policy = policies.create_policy(group=GroupFactory(name="Team", slug="team"), reservation=4, limit=8)
    return policies.connect(policy=policy, profile=profile)


def fresh(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


def run(task: Task, at) -> Task:
    """Claim the placed task on a worker of its pool and start its work at ``at``."""
    task = fresh(task)
    worker = WorkerFactory(pool=task.pool, gpus=8)
    tasks.claim_many(worker, [task], at)
    return tasks.mark_started(fresh(task), at)


@pytest.mark.django_db
def test_time_limit_stops_running_work_that_ends_timed_out_and_cancels_its_after_ok_chain(resource):
    user = UserFactory()
    limited = tasks.submit(user=user, compute_resource=resource, command="train", time_limit_s=60)
    after_ok = tasks.submit(user=user, compute_resource=resource, command="eval", after_ok=[limited.pk])
    chained = tasks.submit(user=user, compute_resource=resource, command="report", after_ok=[after_ok.pk])
    after_any = tasks.submit(user=user, compute_resource=resource, command="clean", after_any=[limited.pk])
    services.run_pass(now=T0)
    assert fresh(limited).state == Task.State.PLACED
    run(limited, T0)

    services.run_pass(now=T0 + timedelta(seconds=59))
    assert fresh(limited).state == Task.State.RUNNING
    record = services.run_pass(now=T0 + timedelta(seconds=60))
    stopped = fresh(limited)
    assert (stopped.state, stopped.stop_reason) == (Task.State.STOPPING, "time_limit")
    assert record.preempted == 1  # the pass's stops; no preemption of the task:
    assert stopped.preemption_count == 0 and stopped.last_preemption_reason == ""
    assert not TaskEvent.objects.filter(task=stopped, kind=TaskEvent.Kind.PREEMPTED).exists()
    assert TaskEvent.objects.get(task=stopped, kind=TaskEvent.Kind.STOP_REQUESTED).reason == "time_limit"
    assert not Notification.objects.filter(kind=Notification.Kind.PREEMPTED).exists()
    services.run_pass(now=T0 + timedelta(seconds=61))  # stopping: not stopped again
    assert TaskEvent.objects.filter(task=stopped, kind=TaskEvent.Kind.STOP_REQUESTED).count() == 1

    tasks.stopped_many([fresh(limited)], T0 + timedelta(seconds=62))
    assert fresh(limited).state == Task.State.TIMED_OUT
    for canceled in (fresh(after_ok), fresh(chained)):
        assert (canceled.state, canceled.stop_reason) == (Task.State.CANCELED, "dependency_failed")
    assert fresh(after_any).waits_on == 0
    services.run_pass(now=T0 + timedelta(seconds=63))
    assert fresh(after_any).state == Task.State.PLACED


@pytest.mark.django_db
def test_time_limit_counts_running_time_across_requeues(resource):
    """A run preempted after 40 of its 60 s leaves it 20 s for its next run."""
    user = UserFactory()
    task = tasks.submit(user=user, compute_resource=resource, command="train", time_limit_s=60)
    services.run_pass(now=T0)
    run(task, T0)
    tasks.request_stop_many([fresh(task)], "reclaim", T0 + timedelta(seconds=40))
    tasks.stopped_many([fresh(task)], T0 + timedelta(seconds=40))
    assert (fresh(task).state, fresh(task).ran_s) == (Task.State.QUEUED, 40)
    services.run_pass(now=T0 + timedelta(seconds=50))
    run(task, T0 + timedelta(seconds=50))
    (placed,) = loader.load(T0 + timedelta(seconds=60)).snapshot.placed
    assert placed.deadline == T0 + timedelta(seconds=70)
    services.run_pass(now=T0 + timedelta(seconds=69))
    assert fresh(task).state == Task.State.RUNNING
    services.run_pass(now=T0 + timedelta(seconds=70))
    assert fresh(task).stop_reason == "time_limit"


@pytest.mark.django_db
def test_dependency_verdict_names_what_it_waits_for_and_it_is_placed_once_they_succeed(resource):
    user = UserFactory()
    first = tasks.submit(user=user, compute_resource=resource, command="a")
    second = tasks.submit(user=user, compute_resource=resource, command="b")
    waiting = tasks.submit(user=user, compute_resource=resource, command="c", after_ok=[first.pk, second.pk])
    snapshot = loader.load(T0).snapshot
    assert [h.id for h in snapshot.held] == [str(waiting.pk)]
    assert snapshot.held[0].waits_for == (str(first.pk), str(second.pk))
    assert str(waiting.pk) not in {t.id for queue in snapshot.waiting.values() for t in queue}

    services.run_pass(now=T0)
    verdict = fresh(waiting).verdict
    assert (fresh(waiting).state, verdict["rule"]) == (Task.State.QUEUED, "dependency")
    assert verdict["waits_for"] == [first.pk, second.pk]
    assert verdict["message"] == f"Waits for task {first.pk} and task {second.pk} to end: it runs after them."
    # the applier skips a held task whose stored key is this one, without building its verdict
    assert verdict["key"] == dependency_key((str(first.pk), str(second.pk)))
    tasks.finish(fresh(first), exit_code=0, at=T0 + timedelta(seconds=1))
    services.run_pass(now=T0 + timedelta(seconds=2))
    verdict = fresh(waiting).verdict
    assert verdict["message"] == f"Waits for task {second.pk} to end: it runs after it."
    services.run_pass(now=T0 + timedelta(seconds=3))
    events = TaskEvent.objects.filter(task=waiting, kind=TaskEvent.Kind.VERDICT)
    assert list(events.values_list("reason", flat=True)) == ["dependency"]  # a new figure is no event

    tasks.finish(fresh(second), exit_code=0, at=T0 + timedelta(seconds=4))
    services.run_pass(now=T0 + timedelta(seconds=5))
    assert fresh(waiting).state == Task.State.PLACED


@pytest.mark.django_db
def test_array_limit_never_places_more_than_max_running_across_passes(resource):
    user = UserFactory()
    array = tasks.submit_array(user=user, size=5, max_running=2, compute_resource=resource, command="sweep")
    ids = [t.pk for t in array]
    at = T0
    for _ in range(8):
        services.run_pass(now=at)
        active = Task.objects.filter(pk__in=ids, state__in=Task.ACTIVE_STATES)
        assert active.count() == min(2, Task.objects.filter(pk__in=ids).exclude(state="succeeded").count())
        waiting = Task.objects.filter(pk__in=ids, state=Task.State.QUEUED).order_by("pk")
        for task in waiting:
            assert task.verdict["rule"] == "array_limit"
            assert task.verdict["message"].startswith(
                f"Array {task.array_id} has its 2 of 2 tasks running at once (max_running)"
            )
        if not active.exists():
            break
        tasks.finish(active.order_by("pk").first(), exit_code=0, at=at + timedelta(seconds=1))
        at += timedelta(seconds=2)
    assert Task.objects.filter(pk__in=ids, state=Task.State.SUCCEEDED).count() == 5


@pytest.mark.django_db
def test_an_uncapped_array_and_other_work_are_placed_as_plain_tasks(resource):
    user = UserFactory()
    array = tasks.submit_array(user=user, size=3, compute_resource=resource, command="sweep")
    assert loader.load(T0).snapshot.arrays == {}
    assert services.run_pass(now=T0).placed == 3
    assert all(fresh(t).state == Task.State.PLACED for t in array)


@pytest.mark.django_db(transaction=True)
def test_the_held_snapshot_follows_time_limits_dependencies_and_arrays(resource):
    """Tasks move between the queues and ``held`` in both directions (a dependency submitted,
    released, failed), capped arrays come and go, and running work gets and loses its deadline:
    after each change the incremental snapshot is what a full load reads."""
    held.forget()
    held.before_pass()
    user = UserFactory()
    now = timezone.now()
    limited = tasks.submit(user=user, compute_resource=resource, command="a", time_limit_s=1)
    assert_held_is_fresh()
    after_ok = tasks.submit(user=user, compute_resource=resource, command="b", after_ok=[limited.pk])
    after_any = tasks.submit(user=user, compute_resource=resource, command="c", after_any=[limited.pk])
    tasks.submit(user=user, compute_resource=resource, command="d", after_ok=[after_ok.pk])
    assert_held_is_fresh()
    array = tasks.submit_array(user=user, size=4, max_running=1, compute_resource=resource, command="e")
    assert_held_is_fresh()
    kept = held._held
    assert kept is not None and len(kept.held) == 3 and kept.caps == {str(array[0].array_id): 1}
    services.run_pass()
    assert_held_is_fresh()
    run(limited, now - timedelta(seconds=5))
    assert_held_is_fresh()
    services.run_pass()  # past its limit: stopped
    assert fresh(limited).state == Task.State.STOPPING
    assert_held_is_fresh()
    tasks.stopped_many([fresh(limited)], timezone.now())
    assert_held_is_fresh()
    assert fresh(after_any).waits_on == 0 and len(held._held.held) == 0
    for task in Task.objects.filter(array=array[0].array_id, state=Task.State.PLACED):
        tasks.finish(task, exit_code=0, at=timezone.now())
    services.run_pass()
    assert_held_is_fresh()
    assert held._held is kept, "read from the change log, not by a full load"
