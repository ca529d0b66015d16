"""Schedules: each due time submits one task as the owner, exactly once even with two beats; a
schedule whose owner lost access stops with a recorded reason and a notification."""

import io
import signal
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from apps.accounts.models import Membership, Notification
from apps.tasks import services
from apps.tasks.models import Schedule, ScheduleRun, Task
from apps.tasks.tasks import submit_due_schedules as celery_submit_due_schedules

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 3, 2, 1, 58, tzinfo=UTC)


def nightly(estate, **fields):
    values = {
        "name": "nightly",
        "cron": "0 2 * * *",
        "compute_resource": estate.vision_a100,
        "command": "train",
    }
    return services.create_schedule(owner=estate.member, now=T0, **{**values, **fields})


def test_a_new_schedule_is_next_due_at_its_first_cron_time(estate):
    assert nightly(estate).next_run_at == datetime(2026, 3, 2, 2, 0, tzinfo=UTC)


def test_a_due_schedule_submits_one_task_as_its_owner_through_the_schedule_channel(estate):
    schedule = nightly(estate, gpus=None, project=estate.project, checkpoint=True)
    assert services.submit_due_schedules(T0 + timedelta(minutes=1)) == 0
    assert services.submit_due_schedules(T0 + timedelta(minutes=2, seconds=5)) == 1
    task = Task.objects.get()
    assert (task.user, task.channel, task.compute_resource, task.project) == (
        estate.member,
        "schedule",
        estate.vision_a100,
        estate.project,
    )
    assert task.checkpoint and task.name == "nightly @ 2026-03-02 02:00"
    run = ScheduleRun.objects.get()
    assert run.task == task and run.due_at == datetime(2026, 3, 2, 2, 0, tzinfo=UTC)
    schedule.refresh_from_db()
    assert schedule.next_run_at == datetime(2026, 3, 3, 2, 0, tzinfo=UTC)


def test_a_second_beat_at_the_same_time_submits_nothing_more(estate):
    nightly(estate)
    at = T0 + timedelta(minutes=3)
    assert services.submit_due_schedules(at) == 1
    assert services.submit_due_schedules(at) == 0
    assert services.submit_due_schedules(at + timedelta(seconds=30)) == 0
    assert Task.objects.count() == 1


def test_a_due_time_already_taken_by_another_beat_is_not_submitted_again(estate):
    schedule = nightly(estate)
    ScheduleRun.objects.create(schedule=schedule, due_at=schedule.next_run_at)
    assert services.submit_due_schedules(T0 + timedelta(minutes=3)) == 0
    assert not Task.objects.exists()


def test_missed_due_times_submit_once_for_the_latest(estate):
    nightly(estate, cron="*/10 * * * *")
    assert services.submit_due_schedules(T0 + timedelta(minutes=45)) == 1
    assert list(ScheduleRun.objects.values_list("due_at", flat=True)) == [
        datetime(2026, 3, 2, 2, 40, tzinfo=UTC)
    ]
    assert Schedule.objects.get().next_run_at == datetime(2026, 3, 2, 2, 50, tzinfo=UTC)


def test_each_due_time_submits_once_over_a_day_of_beats(estate):
    nightly(estate, cron="0 */6 * * *")
    beats = [T0 + timedelta(seconds=15 * i) for i in range(4 * 60 * 24)]
    assert sum(services.submit_due_schedules(at) for at in beats) == 4
    due = sorted(ScheduleRun.objects.values_list("due_at__hour", flat=True))
    assert due == [0, 6, 12, 18]


def test_a_schedule_whose_owner_left_the_group_stops_with_a_reason_and_a_notification(estate):
    schedule = nightly(estate)
    Membership.objects.filter(user=estate.member).delete()
    assert services.submit_due_schedules(T0 + timedelta(minutes=3)) == 0
    schedule.refresh_from_db()
    assert not schedule.active and schedule.next_run_at is None
    assert "no longer a member of Vision" in schedule.stopped_reason
    note = Notification.objects.get(user=estate.member)
    assert note.kind == Notification.Kind.SCHEDULE_STOPPED and "nightly" in note.message
    assert not Task.objects.exists()
    assert services.submit_due_schedules(T0 + timedelta(days=2)) == 0


def test_a_schedule_whose_task_is_refused_stops_with_the_reason(estate):
    schedule = nightly(estate)
    estate.vision_a100.enabled = False
    estate.vision_a100.save()
    services.submit_due_schedules(T0 + timedelta(minutes=3))
    schedule.refresh_from_db()
    assert not schedule.active and "accepts no new tasks" in schedule.stopped_reason


def test_a_stopped_schedule_restarts_when_access_is_back(estate):
    schedule = nightly(estate)
    membership = Membership.objects.get(user=estate.member)
    membership.delete()
    services.submit_due_schedules(T0 + timedelta(minutes=3))
    Membership.objects.create(user=estate.member, group=membership.group, role="member")
    later = T0 + timedelta(days=1, minutes=5)
    schedule = services.update_schedule(Schedule.objects.get(pk=schedule.pk), active=True, now=later)
    assert schedule.active and schedule.stopped_reason == ""
    assert schedule.next_run_at == datetime(2026, 3, 4, 2, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * * * *"}, "cron"),
        ({"cron": "0 0 31 2 *"}, "cron"),
        ({"command": " "}, "command"),
        ({"gpus": "2"}, "gpus"),
    ],
)
def test_a_bad_schedule_is_refused_naming_the_field(estate, fields, field):
    with pytest.raises(ValidationError) as caught:
        nightly(estate, **fields)
    assert field in caught.value.message_dict


def test_the_celery_task_submits_due_schedules_and_is_on_the_beat(estate):
    schedule = nightly(estate)
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=datetime(2020, 1, 1, tzinfo=UTC))
    assert celery_submit_due_schedules.apply().get() == 1
    entry = settings.CELERY_BEAT_SCHEDULE["schedules"]
    assert entry["task"] == celery_submit_due_schedules.name == "klique.tasks.submit_due_schedules"
    assert entry["options"]["expires"] == entry["schedule"]


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_beats_running_at_once_submit_each_due_time_exactly_once(estate):
    schedules = [nightly(estate, name=f"s{i}", cron="*/5 * * * *") for i in range(20)]
    at = T0 + timedelta(minutes=3)
    barrier, results = threading.Barrier(2), []

    def beat():
        barrier.wait()
        try:
            results.append(services.submit_due_schedules(at))
        finally:
            connection.close()

    threads = [threading.Thread(target=beat) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sum(results) == len(schedules)
    assert Task.objects.count() == len(schedules) == ScheduleRun.objects.count()
    assert set(Task.objects.values_list("name", flat=True)) == {f"s{i} @ 2026-03-02 02:00" for i in range(20)}


@pytest.mark.django_db(transaction=True)
def test_the_run_engine_loop_submits_a_due_schedule_exactly_once_and_places_its_task(estate):
    """The embedded default without Celery: ``manage.py run_engine`` calls submit_due_schedules
    on each tick, and its next passes place the task the schedule submitted."""
    schedule = nightly(estate, cron="0 2 * * *")
    Schedule.objects.filter(pk=schedule.pk).update(next_run_at=timezone.now() - timedelta(minutes=1))
    handler = signal.getsignal(signal.SIGTERM)
    try:
        call_command("run_engine", passes=4, interval=0.01, stdout=io.StringIO())
    finally:
        signal.signal(signal.SIGTERM, handler)
    task = Task.objects.get()
    assert (task.channel, task.user, task.name[:10]) == ("schedule", estate.member, "nightly @ ")
    assert ScheduleRun.objects.get().task == task
    schedule.refresh_from_db()
    assert schedule.active and schedule.next_run_at > timezone.now()
    assert (task.state, task.pool) == (Task.State.PLACED, estate.pool)
