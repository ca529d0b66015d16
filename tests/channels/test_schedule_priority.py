"""A schedule's priority: kept as asked (a number, a class's name or none) and resolved at each due
time, so the class's value and the compute resource's default and maximum of that time apply;
checked when the schedule is created or changed (400 naming ``priority``); a run refused for its
priority stops the schedule with the reason."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.policies.models import PriorityClass
from apps.tasks import services
from apps.tasks.models import Schedule, Task

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 3, 2, 1, 58, tzinfo=UTC)
DUE = T0 + timedelta(minutes=2, seconds=5)
BODY = {"name": "nightly", "cron": "0 2 * * *", "compute_resource": "vision/a100", "command": "train"}


@pytest.fixture
def capped(estate):
    for name, value in (("low", 0), ("normal", 100), ("high", 200)):
        PriorityClass.objects.update_or_create(name=name, defaults={"value": value})
    resource = estate.vision_a100
    resource.default_priority, resource.max_priority = 100, 200
    resource.save()
    return estate


def nightly(estate, **fields):
    return services.create_schedule(
        owner=estate.member,
        now=T0,
        name="nightly",
        cron="0 2 * * *",
        compute_resource=estate.vision_a100,
        command="train",
        **fields,
    )


def test_a_run_resolves_the_class_at_its_due_time(capped):
    nightly(capped, priority="high")
    PriorityClass.objects.filter(name="high").update(value=150)
    assert services.submit_due_schedules(DUE) == 1
    assert Task.objects.get().priority == 150


def test_a_schedule_without_a_priority_takes_the_default_of_its_due_time(capped):
    nightly(capped)
    capped.vision_a100.default_priority = 40
    capped.vision_a100.save()
    services.submit_due_schedules(DUE)
    assert Task.objects.get().priority == 40


def test_a_run_above_a_lowered_maximum_stops_the_schedule_with_the_reason(capped):
    schedule = nightly(capped, priority=200)
    capped.vision_a100.max_priority = 100
    capped.vision_a100.save()
    assert services.submit_due_schedules(DUE) == 0
    schedule.refresh_from_db()
    assert not schedule.active and "at most 100 (normal)" in schedule.stopped_reason
    assert not Task.objects.exists()


def test_the_api_keeps_what_was_asked_and_refuses_a_bad_priority_naming_it(capped, api):
    client = api(capped.member)
    created = client.post("/api/v1/schedules/", {**BODY, "priority": "High"}, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["priority"] == "High" and Schedule.objects.get().priority == "High"
    above = client.post("/api/v1/schedules/", {**BODY, "priority": 300}, format="json")
    unknown = client.patch(
        f"/api/v1/schedules/{created.json()['id']}/", {"priority": "urgent"}, format="json"
    )
    assert above.status_code == unknown.status_code == 400
    assert "at most 200 (high)" in above.json()["priority"][0]
    assert "Unknown priority class 'urgent'" in unknown.json()["priority"][0]
    assert Schedule.objects.get().priority == "High"
