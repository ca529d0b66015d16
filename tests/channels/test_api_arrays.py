"""Rule 5 (arrays) over the API: ``POST /api/v1/tasks/array/`` submits N tasks of one spec, each
with its index, and answers the array's id and its tasks; ``GET tasks/?array=ID`` lists them; the
plain submit and bulk endpoints refuse the array's fields rather than ignore them."""

import pytest

from apps.tasks.models import Task, TaskArray

pytestmark = pytest.mark.django_db

ARRAY = "/api/v1/tasks/array/"


def body(**extra):
    return {"compute_resource": "vision/a100", "command": "train --shard $KLIQUE_ARRAY_INDEX", **extra}


def test_arrays_submit_n_tasks_with_their_indexes_and_a_cap(estate, api):
    client = api(estate.member, "sdk")
    response = client.post(ARRAY, body(array=3, max_running=2, time_limit_s=600), format="json")
    assert response.status_code == 201, response.json()
    answer = response.json()
    array = TaskArray.objects.get()
    assert (answer["array"], answer["size"], answer["max_running"]) == (array.pk, 3, 2)
    assert [t["array_index"] for t in answer["tasks"]] == [0, 1, 2]
    assert {t["array"] for t in answer["tasks"]} == {array.pk}
    assert {t["time_limit_s"] for t in answer["tasks"]} == {600}
    assert {t.channel for t in Task.objects.all()} == {"sdk"}
    listed = client.get("/api/v1/tasks/", {"array": array.pk}).json()["results"]
    assert sorted(t["id"] for t in listed) == [t["id"] for t in answer["tasks"]]
    assert client.get("/api/v1/tasks/", {"array": array.pk + 1}).json()["results"] == []


def test_arrays_an_array_may_run_after_a_task(estate, api):
    client = api(estate.member)
    first = client.post("/api/v1/tasks/", body(), format="json").json()["id"]
    response = client.post(ARRAY, body(array=2, after_ok=[first]), format="json")
    assert response.status_code == 201, response.json()
    assert [t["after_ok"] for t in response.json()["tasks"]] == [[first], [first]]


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"array": 0}, "array"),
        ({"array": 1001}, "array"),
        ({"array": "3"}, "array"),
        ({}, "array"),
        ({"array": 2, "max_running": 0}, "max_running"),
        ({"array": 2, "max_running": 1.5}, "max_running"),
        ({"array": 2, "time_limit_s": -1}, "time_limit_s"),
        ({"array": 2, "after_ok": [{"item": 0}]}, "after_ok"),
    ],
)
def test_arrays_bad_input_is_400_naming_the_field(estate, api, extra, field):
    response = api(estate.member).post(ARRAY, body(**extra), format="json")
    assert response.status_code == 400, response.json()
    assert list(response.json()) == [field]
    assert not Task.objects.exists() and not TaskArray.objects.exists()


def test_arrays_a_session_array_is_refused(estate, api):
    response = api(estate.member).post(
        ARRAY, {"kind": "session", "compute_resource": "vision/a100", "array": 2}, format="json"
    )
    assert response.status_code == 400 and list(response.json()) == ["array"]


@pytest.mark.parametrize("url", ["/api/v1/tasks/", "/api/v1/tasks/bulk/"])
def test_arrays_the_submit_and_bulk_endpoints_refuse_the_arrays_fields(estate, api, url):
    item = body(array=3)
    data = {"tasks": [item]} if url.endswith("bulk/") else item
    response = api(estate.member).post(url, data, format="json")
    assert response.status_code == 400
    errors = response.json()["tasks"]["0"] if url.endswith("bulk/") else response.json()
    assert errors == {"array": ["Submit an array (N tasks of one spec) through POST /api/v1/tasks/array/."]}


def test_arrays_another_groups_resource_is_403(estate, api):
    other = {**body(array=2), "compute_resource": "speech/a100"}
    response = api(estate.member).post(ARRAY, other, format="json")
    assert response.status_code in (400, 403)
    assert not Task.objects.exists()


def test_arrays_the_largest_array_is_submitted_and_answered_whole(estate, api):
    response = api(estate.member).post(ARRAY, body(array=1000), format="json")
    assert response.status_code == 201, response.json()
    assert [t["array_index"] for t in response.json()["tasks"]] == list(range(1000))
