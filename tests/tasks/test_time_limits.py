"""Time limits (issue 35, rule 1): the limit a task gets at submit (``resolve_time_limit``: the
compute resource's default, else its profile's, else the maximum; above the maximum refused on
``time_limit_s``), and the end it makes: work stopped at its limit ends ``timed_out``, not requeued;
running time of a requeued run counts on (``ran_s``)."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.tasks import services
from apps.tasks.models import Task, TaskEvent
from apps.tasks.services.time_limits import TIME_LIMIT_MAX_S, left_s, resolve_time_limit
from klique.numbers import duration
from tests.factories import ComputeResourceFactory, PoolFactory, ProfileFactory, UserFactory, WorkerFactory

pytestmark = pytest.mark.django_db


def resource(**fields):
    profile = ProfileFactory(
        default_time_limit_s=fields.pop("profile_default", None),
        max_time_limit_s=fields.pop("profile_max", None),
    )
    found = ComputeResourceFactory(profile=profile, **fields)
    found.profile.pools.add(PoolFactory(capacity=8))
    return found


def refusal(compute_resource, asked, **kwargs) -> str:
    with pytest.raises(ValidationError) as caught:
        resolve_time_limit(compute_resource, asked, **kwargs)
    assert list(caught.value.message_dict) == ["time_limit_s"]
    return caught.value.message_dict["time_limit_s"][0]


def test_asking_for_none_takes_the_resources_default_else_the_profiles_else_the_maximum_else_none():
    assert resolve_time_limit(resource(profile_default=3600), None) == 3600
    assert resolve_time_limit(resource(profile_default=3600, default_time_limit_s=600), None) == 600
    assert resolve_time_limit(resource(profile_max=7200), None) == 7200
    assert resolve_time_limit(resource(), None) is None


def test_a_default_above_the_maximum_is_cut_to_the_maximum():
    assert resolve_time_limit(resource(profile_default=7200, max_time_limit_s=3600), None) == 3600


def test_above_the_maximum_is_refused_naming_both_durations():
    capped = resource(name="vision/a100", profile_max=86400, max_time_limit_s=7200)
    assert resolve_time_limit(capped, 7200) == 7200
    assert refusal(capped, 7201) == (
        "Time limit 2 h (7201 s) is above the maximum on vision/a100: at most 2 h (7200 s)."
    )


@pytest.mark.parametrize("asked", [True, 1.5, "1h", [60]])
def test_other_shapes_than_whole_seconds_are_refused(asked):
    assert refusal(resource(), asked) == "Give the time limit as a whole number of seconds."


@pytest.mark.parametrize("asked", [0, -5, TIME_LIMIT_MAX_S + 1])
def test_a_limit_outside_one_second_to_the_storable_maximum_is_refused(asked):
    assert "from 1 to 2147483647" in refusal(resource(), asked)


def test_a_session_has_no_time_limit_and_asking_one_is_refused():
    assert resolve_time_limit(resource(profile_max=3600), None, session=True) is None
    assert "idle limits" in refusal(resource(), 60, session=True)


def test_durations_read_as_a_person_reads_a_limit():
    assert [duration(s) for s in (90, 2700, 9000, 7200, 273600, 172800)] == [
        "90 s",
        "45 min",
        "2 h 30 min",
        "2 h",
        "3 d 4 h",
        "2 d",
    ]


def test_submit_stores_the_resolved_limit_and_records_it_on_the_submitted_event():
    task = services.submit(user=UserFactory(), compute_resource=resource(profile_default=900), command="x")
    task.refresh_from_db()
    assert task.time_limit_s == 900
    assert TaskEvent.objects.get(task=task).detail["time_limit_s"] == 900


def running(task, pool, started):
    worker = WorkerFactory(pool=pool)
    services.place_many([(task, pool)], started)
    services.claim_many(worker, [task], started)
    services.mark_started(task, started)
    return task


def test_work_stopped_at_its_limit_ends_timed_out_not_requeued():
    target = resource()
    pool = target.profile.pools.get()
    task = services.submit(user=UserFactory(), compute_resource=target, command="x", time_limit_s=60)
    start = timezone.now() - timedelta(seconds=61)
    running(task, pool, start)
    assert left_s(task, start + timedelta(seconds=61)) == -1
    services.request_stop_many([task], Task.StopReason.TIME_LIMIT, start + timedelta(seconds=61))
    services.stopped_many([task], start + timedelta(seconds=63))
    task.refresh_from_db()
    assert (task.state, task.preemption_count) == (Task.State.TIMED_OUT, 0)
    kinds = list(task.events.values_list("kind", "reason"))
    assert kinds[-2:] == [("stop_requested", "time_limit"), ("timed_out", "time_limit")]


def test_a_requeued_run_counts_its_running_time_against_the_limit():
    target = resource()
    pool = target.profile.pools.get()
    task = services.submit(user=UserFactory(), compute_resource=target, command="x", time_limit_s=100)
    start = timezone.now() - timedelta(seconds=40)
    running(task, pool, start)
    services.request_stop_many([task], Task.StopReason.RECLAIM, start + timedelta(seconds=30))
    services.stopped_many([task], start + timedelta(seconds=31), ended_at=start + timedelta(seconds=30))
    task.refresh_from_db()
    assert (task.state, task.ran_s) == (Task.State.QUEUED, 30)
    again = timezone.now()
    running(task, pool, again)
    assert left_s(task, again + timedelta(seconds=20)) == 50


def test_work_that_ends_with_an_error_after_its_limit_is_timed_out_and_before_it_failed():
    target = resource()
    pool = target.profile.pools.get()
    user = UserFactory()
    late = services.submit(user=user, compute_resource=target, command="x", time_limit_s=60)
    early = services.submit(user=user, compute_resource=target, command="x", time_limit_s=60)
    start = timezone.now() - timedelta(seconds=120)
    running(late, pool, start)
    running(early, pool, start)
    services.finish(late, exit_code=137, at=start + timedelta(seconds=61))
    services.finish(early, exit_code=1, at=start + timedelta(seconds=30))
    assert (late.state, early.state) == (Task.State.TIMED_OUT, Task.State.FAILED)


def test_an_end_the_worker_reports_as_timed_out_is_timed_out_whatever_its_code():
    target = resource()
    pool = target.profile.pools.get()
    user = UserFactory()
    reported, caught, done = (
        services.submit(user=user, compute_resource=target, command="x", time_limit_s=60) for _ in range(3)
    )
    start = timezone.now() - timedelta(seconds=120)
    for task in (reported, caught, done):
        running(task, pool, start)
    services.finish(reported, exit_code=143, at=start + timedelta(seconds=59), timed_out=True)
    services.finish(caught, exit_code=0, at=start + timedelta(seconds=60), timed_out=True)
    services.finish(done, exit_code=0, at=start + timedelta(seconds=61))
    assert [t.state for t in (reported, caught, done)] == ["timed_out", "timed_out", "succeeded"]


def test_a_preempted_run_that_used_up_its_limit_ends_timed_out_instead_of_requeued():
    target = resource()
    pool = target.profile.pools.get()
    task = services.submit(user=UserFactory(), compute_resource=target, command="x", time_limit_s=30)
    start = timezone.now() - timedelta(seconds=40)
    running(task, pool, start)
    services.request_stop_many([task], Task.StopReason.RECLAIM, start + timedelta(seconds=31))
    services.stopped_many([task], start + timedelta(seconds=32), ended_at=start + timedelta(seconds=31))
    task.refresh_from_db()
    assert (task.state, task.ran_s) == (Task.State.TIMED_OUT, 31)
