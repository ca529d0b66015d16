"""The worker API's limits on request bodies (docs/channels.md, "Limits"): JSON nested too deep and
strings holding NUL or a lone surrogate are 400 naming the problem and the field; GPU amounts are
plain ASCII decimals; the free GPUs a heartbeat or a claim reports never exceed the worker's GPUs."""

import json

import pytest
from django.utils import timezone

from apps.pools.models import Worker
from apps.tasks.models import TaskEvent
from apps.workers import services as protocol
from tests.pools.conftest import bearer

pytestmark = pytest.mark.django_db

ENROL, HEARTBEAT = "/api/v1/workers/enrol", "/api/v1/workers/heartbeat"


def deep(depth: int) -> str:
    return (
        '{"hostname": "h", "gpus": "1", "tasks": [], "gpu_stats": '
        + "[" * (depth - 1)
        + "]" * (depth - 1)
        + "}"
    )


def post_raw(client, url, text: str):
    return client.post(url, data=text, content_type="application/json")


def test_enrolment_nested_deeper_than_the_bound_is_400_naming_the_nesting(enrolment):
    _, raw = enrolment
    answer = post_raw(bearer(raw), ENROL, deep(1000))
    assert answer.status_code == 400, answer.content
    assert "nested deeper than 64" in answer.json()["detail"]
    assert not Worker.objects.exists()


def test_a_heartbeat_nested_deeper_than_the_bound_is_400_naming_the_nesting(enrol):
    _, client = enrol()
    answer = post_raw(client, HEARTBEAT, deep(1000))
    assert answer.status_code == 400, answer.content
    assert "nested deeper than 64" in answer.json()["detail"]


BAD_STRINGS = pytest.mark.parametrize(("bad", "named"), [("\ud800", "lone surrogate"), ("\x00", "NUL")])


@BAD_STRINGS
@pytest.mark.parametrize("where", ["key", "value"])
def test_gpu_stats_holding_nul_or_a_lone_surrogate_are_400_naming_the_field(enrol, where, bad, named):
    worker, client = enrol()
    stats = [{f"util{bad}": 1}] if where == "key" else [{"name": f"A100{bad}"}]
    answer = post_raw(client, HEARTBEAT, json.dumps({"tasks": [], "gpu_stats": stats}))
    assert answer.status_code == 400, answer.content
    message = answer.json()["gpu_stats"][0]
    assert named in message and "gpu_stats[0]" in message
    worker.refresh_from_db()
    assert worker.gpu_stats in ([], None, {})


def test_gpu_stats_holding_a_number_out_of_range_is_400(enrol):
    _, client = enrol()
    answer = post_raw(client, HEARTBEAT, '{"tasks": [], "gpu_stats": [{"t": 1e999}]}')
    assert answer.status_code == 400, answer.content
    assert "out of range" in str(answer.json())


@BAD_STRINGS
@pytest.mark.parametrize("where", ["key", "value"])
def test_a_started_detail_holding_nul_or_a_lone_surrogate_is_400_naming_the_field(
    pool, enrol, place, where, bad, named
):
    worker, client = enrol()
    (task,) = place(pool, 1)
    protocol.claim(worker, free=[1000], free_gpus=None, max_tasks=1, now=timezone.now())
    detail = {f"pid{bad}": "1"} if where == "key" else {"pid": f"1{bad}"}
    answer = post_raw(client, f"/api/v1/workers/tasks/{task.pk}/started", json.dumps({"detail": detail}))
    assert answer.status_code == 400, answer.content
    assert named in answer.json()["detail"][0]
    assert not task.events.filter(kind=TaskEvent.Kind.STARTED).exists()


@pytest.mark.parametrize("gpus", ["1_0", "１", "٣", "1e1", "+2"])
def test_enrolment_gpus_in_loose_notation_are_400_naming_gpus(enrolment, gpus):
    _, raw = enrolment
    answer = bearer(raw).post(ENROL, {"hostname": "h", "gpus": gpus}, format="json")
    assert answer.status_code == 400 and "gpus" in answer.json(), answer.content
    assert not Worker.objects.exists()


@pytest.mark.parametrize("field", ["gpus", "free_gpus"])
@pytest.mark.parametrize("value", ["1_0", "２"])
def test_heartbeat_gpus_in_loose_notation_are_400_naming_the_field(enrol, field, value):
    _, client = enrol(gpus="8")
    answer = client.post(HEARTBEAT, {"tasks": [], field: value}, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.content


def test_heartbeat_task_ids_in_loose_notation_are_400(enrol):
    _, client = enrol()
    answer = client.post(HEARTBEAT, {"tasks": ["1_0"]}, format="json")
    assert answer.status_code == 400 and "tasks" in answer.json(), answer.content


def test_a_heartbeat_with_more_free_gpus_than_the_worker_has_is_400_naming_free_gpus(enrol):
    worker, client = enrol(gpus="4")
    answer = client.post(HEARTBEAT, {"tasks": [], "free_gpus": "5"}, format="json")
    assert answer.status_code == 400, answer.content
    assert "free_gpus" in answer.json() and "4" in answer.json()["free_gpus"][0]
    worker.refresh_from_db()
    assert worker.free_gpus == 4
    answer = client.post(HEARTBEAT, {"tasks": [], "gpus": "8", "free_gpus": "9"}, format="json")
    assert answer.status_code == 400 and "free_gpus" in answer.json(), answer.content


def test_a_heartbeat_may_raise_its_gpus_and_report_them_free(enrol):
    worker, client = enrol(gpus="4")
    answer = client.post(HEARTBEAT, {"tasks": [], "gpus": "8", "free_gpus": "8"}, format="json")
    assert answer.status_code == 200, answer.content
    worker.refresh_from_db()
    assert (worker.gpus, worker.free_gpus) == (8, 8)


CLAIM = "/api/v1/workers/claim"


@pytest.mark.parametrize(
    ("body", "field"),
    [({"free_gpus": "5"}, "free_gpus"), ({"slots": ["1", "1", "1", "1", "0.5"]}, "slots")],
)
def test_a_claim_with_more_free_gpus_than_the_worker_has_is_400_naming_the_field(
    pool, enrol, place, body, field
):
    _, client = enrol(gpus="4")
    (task,) = place(pool, 1)
    answer = client.post(CLAIM, body, format="json")
    assert answer.status_code == 400, answer.content
    assert field in answer.json() and "4" in answer.json()[field][0]
    assert not task.events.filter(kind=TaskEvent.Kind.CLAIMED).exists()


@pytest.mark.parametrize("body", [{"free_gpus": "4"}, {"slots": ["1", "1", "1", "1"]}])
def test_a_claim_of_all_the_workers_gpus_is_accepted(pool, enrol, place, body):
    _, client = enrol(gpus="4")
    (task,) = place(pool, 1)
    answer = client.post(CLAIM, body, format="json")
    assert answer.status_code == 200, answer.content
    assert [t["id"] for t in answer.json()["tasks"]] == [task.pk]
