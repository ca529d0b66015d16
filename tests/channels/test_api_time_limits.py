"""Rule 1 (time limits) over the API: ``time_limit_s`` on submit, bulk and schedules, the compute
resource's default and maximum (resolved as the service resolves them), what a task shows
(``time_limit_s``, ``ran_s``, ``time_left_s``, state ``timed_out``), and every refusal a 400
naming the field."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.tasks import services
from apps.tasks.models import Schedule, Task
from tests.channels.live import loaded

pytestmark = pytest.mark.django_db

TASKS = "/api/v1/tasks/"


@pytest.fixture
def limited(estate):
    """vision/a100's profile: default 1 h, at most 4 h; vision/a100-any overrides the maximum: 2 h."""
    profile = estate.vision_a100.profile
    profile.default_time_limit_s, profile.max_time_limit_s = 3600, 4 * 3600
    profile.save()
    sized = estate.vision_sized
    sized.profile.default_time_limit_s = None
    sized.profile.save()
    sized.max_time_limit_s = 2 * 3600
    sized.save()
    return estate


def submit(client, **body):
    return client.post(TASKS, {"compute_resource": "vision/a100", "command": "train", **body}, format="json")


def test_time_limits_a_task_asks_for_a_limit_or_gets_the_default_and_shows_it(limited, api):
    client = api(limited.member)
    asked, default = submit(client, time_limit_s=5400), submit(client)
    assert asked.status_code == default.status_code == 201, asked.json()
    assert asked.json()["time_limit_s"] == 5400 and default.json()["time_limit_s"] == 3600
    assert asked.json()["ran_s"] == 0 and asked.json()["time_left_s"] == 5400
    listed = client.get(TASKS).json()["results"]
    assert {t["time_limit_s"] for t in listed} == {5400, 3600}
    assert {t["time_left_s"] for t in listed} == {5400, 3600}


def test_time_limits_a_running_tasks_time_left_counts_earlier_runs_and_this_one(limited, api):
    task = Task.objects.get(pk=submit(api(limited.member), time_limit_s=3600).json()["id"])
    services.place_many([(loaded(task.pk), limited.pool)], timezone.now())
    Task.objects.filter(pk=task.pk).update(
        state=Task.State.RUNNING, ran_s=600, started_at=timezone.now() - timedelta(seconds=300)
    )
    shown = api(limited.member).get(f"{TASKS}{task.pk}/").json()
    assert shown["ran_s"] == 600
    assert 3600 - 600 - 302 <= shown["time_left_s"] <= 3600 - 600 - 300


def test_time_limits_a_timed_out_task_shows_its_state_and_the_state_filter_takes_it(limited, api):
    task = Task.objects.get(pk=submit(api(limited.member)).json()["id"])
    Task.objects.filter(pk=task.pk).update(
        state=Task.State.TIMED_OUT, stop_reason=Task.StopReason.TIME_LIMIT, ran_s=3600
    )
    client = api(limited.member)
    assert client.get(f"{TASKS}{task.pk}/").json()["state"] == "timed_out"
    assert [t["id"] for t in client.get(TASKS, {"state": "timed_out"}).json()["results"]] == [task.pk]
    assert [t["id"] for t in client.get(TASKS, {"state": "done"}).json()["results"]] == [task.pk]


@pytest.mark.parametrize(
    ("asked", "words"),
    [
        (4 * 3600 + 1, "Time limit 4 h (14401 s) is above the maximum"),
        (0, "Ensure this value is greater than or equal to 1."),
        (2**31, "Ensure this value is less than or equal to 2147483647."),
        ("3600", 'Enter a whole number as a JSON integer (8, not "8").'),
        (1.5, "Enter a whole number as a JSON integer"),
        (True, 'Enter a whole number as a JSON integer (8, not "8").'),
    ],
)
def test_time_limits_a_refused_limit_is_400_naming_time_limit_s(limited, api, asked, words):
    response = submit(api(limited.member), time_limit_s=asked)
    assert response.status_code == 400, response.json()
    assert list(response.json()) == ["time_limit_s"]
    assert words in response.json()["time_limit_s"][0]
    assert not Task.objects.exists()


def test_time_limits_over_the_maximum_says_the_maximum(limited, api):
    response = submit(api(limited.member), time_limit_s=5 * 3600)
    assert response.json()["time_limit_s"] == [
        "Time limit 5 h (18000 s) is above the maximum on vision/a100: at most 4 h (14400 s)."
    ]


def test_time_limits_a_session_takes_no_time_limit(limited, api):
    response = api(limited.member).post(
        TASKS, {"kind": "session", "compute_resource": "vision/a100", "time_limit_s": 60}, format="json"
    )
    assert response.json() == {"time_limit_s": ["A session has no time limit: its idle limits end it."]}


def test_time_limits_bulk_items_each_resolve_and_a_refused_one_is_named_by_index(limited, api):
    client = api(limited.member)
    items = [
        {"compute_resource": "vision/a100", "command": "a", "time_limit_s": 60},
        {"compute_resource": "vision/a100", "command": "b"},
    ]
    ok = client.post(f"{TASKS}bulk/", {"tasks": items}, format="json")
    assert ok.status_code == 201, ok.json()
    assert [t["time_limit_s"] for t in ok.json()] == [60, 3600]
    refused = client.post(
        f"{TASKS}bulk/", {"tasks": [items[0], {**items[1], "time_limit_s": 10**6}]}, format="json"
    )
    assert refused.status_code == 400
    assert list(refused.json()["tasks"]) == ["1"] and "time_limit_s" in refused.json()["tasks"]["1"]


def test_time_limits_the_compute_resources_api_shows_the_resolved_default_and_maximum(limited, api):
    rows = {r["name"]: r for r in api(limited.member).get("/api/v1/compute-resources/").json()["results"]}
    assert (rows["vision/a100"]["default_time_limit_s"], rows["vision/a100"]["max_time_limit_s"]) == (
        3600,
        4 * 3600,
    )
    # no default anywhere, a maximum on the compute resource: a task that asks for none gets the maximum
    assert (rows["vision/a100-any"]["default_time_limit_s"], rows["vision/a100-any"]["max_time_limit_s"]) == (
        2 * 3600,
        2 * 3600,
    )
    quarter = rows["vision/a100-quarter"]
    assert (quarter["default_time_limit_s"], quarter["max_time_limit_s"]) == (None, None)


def test_time_limits_a_schedule_keeps_its_limit_checks_it_and_passes_it_to_each_run(limited, api):
    client = api(limited.member)
    body = {
        "name": "nightly",
        "cron": "0 2 * * *",
        "compute_resource": "vision/a100",
        "command": "train",
        "time_limit_s": 1800,
    }
    created = client.post("/api/v1/schedules/", body, format="json")
    assert created.status_code == 201, created.json()
    assert created.json()["time_limit_s"] == 1800
    too_long = client.post("/api/v1/schedules/", {**body, "time_limit_s": 10**6}, format="json")
    assert too_long.status_code == 400 and list(too_long.json()) == ["time_limit_s"]
    schedule = Schedule.objects.get()
    patched = client.patch(f"/api/v1/schedules/{schedule.pk}/", {"time_limit_s": 10**6}, format="json")
    assert patched.status_code == 400 and list(patched.json()) == ["time_limit_s"]
    services.submit_due_schedules(schedule.next_run_at)
    assert Task.objects.get().time_limit_s == 1800
    cleared = client.patch(f"/api/v1/schedules/{schedule.pk}/", {"time_limit_s": None}, format="json")
    assert cleared.status_code == 200 and cleared.json()["time_limit_s"] is None
    services.submit_due_schedules(Schedule.objects.get().next_run_at + timedelta(days=1))
    assert Task.objects.order_by("pk").last().time_limit_s == 3600
