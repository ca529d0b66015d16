"""Dependencies (issue 35, rule 2): ``after_ok`` and ``after_any`` at submit (own tasks only,
earlier items of a bulk request, no task twice, an ``after_ok`` on a task that did not succeed
refused) and what an end does: ``waits_on`` counts down, and a dependency that did not succeed
cancels its ``after_ok`` dependants (reason ``dependency_failed``), and theirs in turn."""

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.tasks import services
from apps.tasks.models import Task, TaskDependency
from tests.factories import ComputeResourceFactory, PoolFactory, UserFactory, WorkerFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def target():
    found = ComputeResourceFactory()
    found.profile.pools.add(PoolFactory(capacity=8))
    return found


@pytest.fixture
def user():
    return UserFactory()


def submit(user, target, **fields):
    return services.submit(user=user, compute_resource=target, command="x", **fields)


def refused(user, target, **fields) -> dict:
    with pytest.raises(ValidationError) as caught:
        submit(user, target, **fields)
    return caught.value.message_dict


def run_to_end(task, exit_code):
    now = timezone.now()
    pool = task.compute_resource.profile.pools.get()
    services.place_many([(task, pool)], now)
    services.claim_many(WorkerFactory(pool=pool), [task], now)
    services.mark_started(task, now)
    services.finish(task, exit_code=exit_code, at=now)


def fresh(task):
    task.refresh_from_db()
    return task


def test_a_task_waits_on_its_unended_dependencies_and_each_end_counts_down(user, target):
    a, b = submit(user, target), submit(user, target)
    c = submit(user, target, after_ok=[a.pk], after_any=[b.pk])
    assert c.waits_on == 2
    assert set(TaskDependency.objects.filter(task=c).values_list("needs_id", "kind")) == {
        (a.pk, "after_ok"),
        (b.pk, "after_any"),
    }
    run_to_end(b, 1)
    assert (fresh(c).waits_on, c.state) == (1, Task.State.QUEUED)
    run_to_end(a, 0)
    assert (fresh(c).waits_on, c.state) == (0, Task.State.QUEUED)


def test_an_after_ok_that_fails_cancels_the_chain_with_reason_dependency_failed(user, target):
    a = submit(user, target)
    b = submit(user, target, after_ok=[a.pk])
    c = submit(user, target, after_ok=[b.pk])
    d = submit(user, target, after_any=[b.pk])
    run_to_end(a, 3)
    for task in (b, c):
        assert (fresh(task).state, task.stop_reason) == (Task.State.CANCELED, "dependency_failed")
    assert fresh(b).events.last().detail == {"after": a.pk, "ended": "failed"}
    assert (fresh(d).state, d.waits_on) == (Task.State.QUEUED, 0)


def test_canceling_a_waiting_task_cancels_its_after_ok_dependants(user, target):
    a = submit(user, target)
    b = submit(user, target, after_ok=[a.pk])
    services.cancel(a)
    assert (fresh(b).state, b.stop_reason) == (Task.State.CANCELED, "dependency_failed")


def test_a_dependency_that_already_ended_is_recorded_but_not_waited_for(user, target):
    a = submit(user, target)
    run_to_end(a, 0)
    b = submit(user, target, after_ok=[a.pk])
    assert b.waits_on == 0 and TaskDependency.objects.filter(task=b, needs=a).exists()


def test_an_after_ok_on_a_task_that_did_not_succeed_is_refused(user, target):
    a = submit(user, target)
    run_to_end(a, 1)
    assert refused(user, target, after_ok=[a.pk]) == {
        "after_ok": [f"Task {a.pk} ended failed, so this task could never run."]
    }
    assert submit(user, target, after_any=[a.pk]).waits_on == 0


def test_unknown_ids_and_another_users_tasks_are_refused_alike(user, target):
    theirs = submit(UserFactory(), target)
    assert refused(user, target, after_ok=[theirs.pk]) == {
        "after_ok": [f"Task {theirs.pk} is unknown (or not yours)."]
    }
    unknown = refused(user, target, after_any=[999999])
    assert unknown == {"after_any": ["Task 999999 is unknown (or not yours)."]}


@pytest.mark.parametrize(
    ("asked", "why"),
    [
        ("12", "Give a list of task ids."),
        ([0], "0 is not a task id."),
        ([True], "True is not a task id."),
        ([{"item": 0}], "Name earlier items ({'item': n}) only in a bulk submission."),
    ],
)
def test_malformed_dependencies_are_refused_on_their_field(user, target, asked, why):
    assert refused(user, target, after_ok=asked) == {"after_ok": [why]}


def test_a_task_named_twice_is_refused(user, target):
    a = submit(user, target)
    assert refused(user, target, after_ok=[a.pk], after_any=[a.pk]) == {
        "after_any": [f"Task {a.pk} is named twice."]
    }


def test_bulk_items_may_run_after_earlier_items_only(user, target):
    first, second, third = services.submit_many(
        user=user,
        items=[
            {"compute_resource": target, "command": "prepare"},
            {"compute_resource": target, "command": "train", "after_ok": [{"item": 0}]},
            {"compute_resource": target, "command": "report", "after_any": [{"item": 1}, {"item": 0}]},
        ],
    )
    assert (first.waits_on, second.waits_on, third.waits_on) == (0, 1, 2)
    with pytest.raises(services.SubmissionsRefused) as caught:
        services.submit_many(
            user=user,
            items=[
                {"compute_resource": target, "command": "a", "after_ok": [{"item": 1}]},
                {"compute_resource": target, "command": "b"},
            ],
        )
    assert caught.value.errors == {
        0: {"after_ok": ["Item 1 is not an earlier item of this request (this is item 0)."]}
    }


def test_a_session_runs_after_no_task(user, target):
    a = submit(user, target)
    assert "after_ok" in refused(user, target, kind=Task.Kind.SESSION, after_ok=[a.pk])


def test_an_array_is_its_size_of_tasks_with_their_indexes_and_cap(user, target):
    tasks = services.submit_array(user=user, compute_resource=target, command="x", size=3, max_running=2)
    assert [t.array_index for t in tasks] == [0, 1, 2]
    assert {t.array_id for t in tasks} == {tasks[0].array_id}
    assert (tasks[0].array.size, tasks[0].array.max_running) == (3, 2)
    with pytest.raises(ValidationError) as caught:
        services.submit_array(user=user, compute_resource=target, command="x", size=0)
    assert list(caught.value.message_dict) == ["array"]
    with pytest.raises(ValidationError) as caught:
        services.submit_array(user=user, compute_resource=target, command="x", size=2, max_running=0)
    assert list(caught.value.message_dict) == ["max_running"]
