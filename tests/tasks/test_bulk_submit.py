"""Bulk submission (``POST /api/v1/tasks/bulk/``, ``services.submit_many``): each item checked by
the single submit's rules, all or none, created and answered in order, the same permissions, and
one engine pass requested per request."""

import pytest
from django.core.exceptions import ValidationError

from apps.policies.models import ResourcePolicy
from apps.tasks import services, wake
from apps.tasks.models import Task, TaskEvent
from tests.channels.conftest import client_for
from tests.channels.conftest import estate as estate  # the fixture
from tests.factories import ComputeResourceFactory

pytestmark = pytest.mark.django_db

URL = "/api/v1/tasks/bulk/"


def item(resource="vision/a100", command="train.py", **fields):
    return {"compute_resource": resource, "command": command, **fields}


def pass_requests(callbacks) -> int:
    return sum(callback is wake._request_now for callback in callbacks)


def test_bulk_creates_the_tasks_in_order_and_answers_them_like_a_single_submit(estate):
    client = client_for(estate.member, "sdk")
    items = [
        item(name="first"),
        item("vision/a100-any", gpus="2", name="second", project="detector", spec={"env": {"A": "1"}}),
        item("vision/a100-quarter", name="third", checkpoint=True),
    ]
    response = client.post(URL, {"tasks": items}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert [t["name"] for t in body] == ["first", "second", "third"]
    ids = [t["id"] for t in body]
    assert ids == sorted(ids)
    stored = list(Task.objects.filter(pk__in=ids).order_by("pk"))
    assert [t.queue_seq for t in stored] == ids
    assert [t.channel for t in stored] == ["sdk"] * 3
    assert [t["queue_position"] for t in body] == [1, 1, 1]
    assert (
        body[1]["gpus"] == "2.000"
        and body[1]["project"] == "detector"
        and body[1]["spec"] == {"env": {"A": "1"}}
    )
    assert set(TaskEvent.objects.filter(task_id__in=ids).values_list("kind", flat=True)) == {"submitted"}
    single = client.post("/api/v1/tasks/", item(name="single"), format="json").json()
    assert set(single) == set(body[0]) and body[0]["preemptions"] == [] and body[0]["session"] is None
    assert client.get(f"/api/v1/tasks/{ids[1]}/").json() == body[1] | {"queue_position": 1}


def test_one_bad_item_refuses_the_whole_request_naming_its_index_and_field(estate):
    items = [item(), item(), item(), item(gpus="3"), item(), item(gpus="2")]
    response = client_for(estate.member).post(URL, {"tasks": items}, format="json")
    assert response.status_code == 400
    errors = response.json()["tasks"]
    assert set(errors) == {"3", "5"}
    assert "fixed size" in errors["3"]["gpus"][0]
    assert not Task.objects.exists()


def test_items_that_do_not_read_are_refused_first_naming_index_and_field(estate):
    """Like a single submit: the form of every item first, then the service's rules."""
    items = [item(), {"command": "x"}, item(command=""), "train.py", item(gpus="3")]
    response = client_for(estate.member).post(URL, {"tasks": items}, format="json")
    errors = response.json()["tasks"]
    assert set(errors) == {"1", "2", "3"}
    assert errors["1"] == {"compute_resource": ["This field is required."]}
    assert "command" in errors["2"] and "non_field_errors" in errors["3"]
    assert not Task.objects.exists()


def test_a_refusal_of_the_service_layer_is_per_item_too(estate):
    """The rules the service checks (here the policy limit, 4 GPUs) answer in the same shape."""
    items = [item("vision/a100-any", gpus="1"), item("vision/a100-any", gpus="5")]
    response = client_for(estate.member).post(URL, {"tasks": items}, format="json")
    assert response.status_code == 400
    assert "exceed the limit" in response.json()["tasks"]["1"]["gpus"][0]
    assert not Task.objects.exists()


def test_submit_many_checks_every_item_with_the_single_submits_rules(estate):
    resource = estate.vision_sized
    good = {"compute_resource": resource, "command": "a", "gpus": "1"}
    with pytest.raises(services.SubmissionsRefused) as refused:
        services.submit_many(
            user=estate.member, items=[good, {**good, "gpus": "9"}, {**good, "command": " "}]
        )
    assert set(refused.value.errors) == {1, 2}
    assert "gpus" in refused.value.errors[1] and "command" in refused.value.errors[2]
    with pytest.raises(ValidationError) as single:
        services.submit(user=estate.member, **{**good, "gpus": "9"})
    assert single.value.message_dict == refused.value.errors[1]
    assert not Task.objects.exists()


def test_an_empty_list_or_no_list_is_refused(estate):
    client = client_for(estate.member)
    assert client.post(URL, {"tasks": []}, format="json").json() == {"tasks": ["Give at least one task."]}
    for body in ({}, {"tasks": {"0": item()}}, [item()]):
        response = client.post(URL, body, format="json")
        assert response.status_code == 400 and "tasks" in response.json()


def test_more_than_the_limit_is_refused_naming_it(estate, settings):
    settings.TASKS_BULK_MAX = 3
    response = client_for(estate.member).post(URL, {"tasks": [item()] * 4}, format="json")
    assert response.status_code == 400
    assert "At most 3 tasks" in response.json()["tasks"][0]
    assert not Task.objects.exists()
    assert client_for(estate.member).post(URL, {"tasks": [item()] * 3}, format="json").status_code == 201


def test_bulk_cannot_submit_to_another_groups_compute_resource(estate):
    """IT sees Vision's resources but is no member of Vision, so may not submit there: 403 naming
    the item, and nothing is created, not even the item to IT's own group's resource."""
    org_policy = ResourcePolicy.objects.get(group__slug="acme")
    ComputeResourceFactory(name="acme/a100", policy=org_policy, profile=estate.vision_a100.profile)
    it = client_for(estate.it)
    response = it.post(URL, {"tasks": [item("acme/a100"), item("vision/a100")]}, format="json")
    assert response.status_code == 403
    assert response.json()["detail"].startswith("Task 1: You may submit only")
    assert not Task.objects.exists()
    assert it.post(URL, {"tasks": [item("acme/a100")]}, format="json").status_code == 201


def test_a_resource_the_user_may_not_see_reads_as_unknown_per_item(estate):
    response = client_for(estate.member).post(URL, {"tasks": [item(), item("speech/a100")]}, format="json")
    assert response.status_code == 400
    assert "Unknown compute resource" in response.json()["tasks"]["1"]["compute_resource"][0]


def test_sessions_are_not_taken_in_bulk(estate):
    body = {"tasks": [item(), {"kind": "session", "compute_resource": "vision/a100"}]}
    response = client_for(estate.member).post(URL, body, format="json")
    assert response.status_code == 400 and "kind" in response.json()["tasks"]["1"]


def test_a_bulk_submission_requests_one_engine_pass(estate, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        response = client_for(estate.member).post(URL, {"tasks": [item()] * 5}, format="json")
    assert response.status_code == 201
    assert pass_requests(callbacks) == 1


def test_a_refused_bulk_submission_requests_no_pass(estate, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks() as callbacks:
        client_for(estate.member).post(URL, {"tasks": [item(), item(gpus="3")]}, format="json")
    assert pass_requests(callbacks) == 0


def test_a_single_submit_and_a_cancel_each_request_one_pass(estate, django_capture_on_commit_callbacks):
    client = client_for(estate.member)
    with django_capture_on_commit_callbacks() as callbacks:
        task = client.post("/api/v1/tasks/", item(), format="json").json()
    assert pass_requests(callbacks) == 1
    with django_capture_on_commit_callbacks() as callbacks:
        assert client.post(f"/api/v1/tasks/{task['id']}/cancel/").status_code == 200
    assert pass_requests(callbacks) == 1
