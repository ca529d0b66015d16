"""A task's priority over the API (submit, bulk, sessions): a whole number or a priority class's
name, the compute resource's default when left out, the maximum enforced; every refusal is a 400
naming ``priority`` and the reason, never a 500; the task's representation carries its priority."""

import pytest

from apps.policies.models import PriorityClass
from apps.sessions.models import SessionKind
from apps.tasks.models import Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def capped(estate):
    """vision/a100: default 100, maximum 200 (the class high); IT's classes low, normal, high."""
    for name, value in (("low", 0), ("normal", 100), ("high", 200)):
        PriorityClass.objects.update_or_create(name=name, defaults={"value": value})
    resource = estate.vision_a100
    resource.default_priority, resource.max_priority = 100, 200
    resource.save()
    return estate


def submit(client, **body):
    return client.post(
        "/api/v1/tasks/", {"compute_resource": "vision/a100", "command": "train", **body}, format="json"
    )


@pytest.mark.parametrize(("asked", "got"), [("high", 200), ("HIGH", 200), (150, 150), (-3, -3)])
def test_a_class_name_or_a_whole_number_sets_the_tasks_priority(capped, api, asked, got):
    response = submit(api(capped.member), priority=asked)
    assert response.status_code == 201, response.json()
    assert response.json()["priority"] == got and Task.objects.get().priority == got


def test_left_out_or_null_the_resources_default_applies_and_the_detail_shows_it(capped, api):
    client = api(capped.member)
    left_out, null = submit(client), submit(client, priority=None)
    assert left_out.json()["priority"] == null.json()["priority"] == 100
    detail = client.get(f"/api/v1/tasks/{left_out.json()['id']}/").json()
    listed = client.get("/api/v1/tasks/").json()["results"]
    assert detail["priority"] == 100 and {t["priority"] for t in listed} == {100}


@pytest.mark.parametrize(
    ("asked", "words"),
    [
        (201, "Priority 201 is above the maximum: at most 200 (high) on vision/a100."),
        ("urgent", "Unknown priority class 'urgent'; the classes are low (0), normal (100), high (200)"),
        (True, "Give a whole number as a JSON integer (200) or a priority class's name (high)."),
        (1.5, "Give a whole number as a JSON integer (200)"),
        ("200", "Unknown priority class '200'"),
        ("", "A priority class's name is at most 40 letters"),
        ("hi gh", "A priority class's name is at most 40 letters"),
        (2**31, "A priority is a whole number from -2147483648 to 2147483647."),
    ],
)
def test_a_refused_priority_answers_400_naming_the_field_and_the_reason(capped, api, asked, words):
    response = submit(api(capped.member), priority=asked)
    assert response.status_code == 400
    assert list(response.json()) == ["priority"] and words in response.json()["priority"][0]
    assert not Task.objects.exists()


def test_a_session_takes_a_priority_too(capped, api):
    SessionKind.objects.create(name="JupyterLab", type=SessionKind.Type.JUPYTER)
    response = api(capped.member).post(
        "/api/v1/tasks/",
        {"kind": "session", "compute_resource": "vision/a100", "priority": "low"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert Task.objects.get().priority == 0


def test_bulk_items_each_resolve_and_a_refused_one_is_named_by_index(capped, api):
    client = api(capped.member)
    ok = client.post(
        "/api/v1/tasks/bulk/",
        {
            "tasks": [
                {"compute_resource": "vision/a100", "command": "a", "priority": "normal"},
                {"compute_resource": "vision/a100", "command": "b"},
                {"compute_resource": "vision/a100", "command": "c", "priority": 7},
            ]
        },
        format="json",
    )
    assert ok.status_code == 201 and [t["priority"] for t in ok.json()] == [100, 100, 7]
    refused = client.post(
        "/api/v1/tasks/bulk/",
        {
            "tasks": [
                {"compute_resource": "vision/a100", "command": "a"},
                {"compute_resource": "vision/a100", "command": "b", "priority": 999},
                {"compute_resource": "vision/a100", "command": "c", "priority": "nope"},
            ]
        },
        format="json",
    )
    assert refused.status_code == 400
    errors = refused.json()["tasks"]
    assert set(errors) == {"1", "2"} and "at most 200 (high)" in errors["1"]["priority"][0]
    assert "Unknown priority class 'nope'" in errors["2"]["priority"][0]
    assert Task.objects.count() == 3


def test_the_schema_documents_priority_as_an_integer_or_a_class_name(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()["components"]["schemas"]
    asked = schema["SubmitRequest"]["properties"]["priority"]
    assert [part["type"] for part in asked["oneOf"]] == ["integer", "string"]
    assert "default priority" in asked["description"] and "maximum" in asked["description"]
    assert schema["TaskDetail"]["properties"]["priority"]["type"] == "integer"
