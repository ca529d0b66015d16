"""A task as the API and ``klique status`` show it: its priority with its class's name, why it
waits (the engine's verdict, which names its expected start), and, where the parent of its group
lends fairly, what the group borrows against its fair share.

The estate (tests/channels/conftest.py): Research (limit 16) over Vision and Speech, each
reservation 2 and limit 4, on one pool of 8 GPUs. With Research lending fairly, Vision runs 3 GPUs
and waits for 1 more, Speech waits for 2: they borrow 1; Research may take min(8 - 3, 16 - 3) = 5
more: 6 to share. Vision wants 3 + 1 - 2 = 2 above its reservation, Speech nothing (its 2 are
inside its reservation): Vision's fair share is 2, Speech's 0."""

import json

import pytest

from apps.policies.models import PriorityClass, ResourcePolicy
from apps.tasks import services
from apps.tasks.models import Task
from tests.channels.conftest import token_for
from tests.channels.live import klique, logged_in, place

VERDICT = {
    "rule": "no_capacity",
    "message": "No room for its size in its pools (onprem): their declared capacity is in use.",
}


def fair(estate, lending="fair") -> Task:
    ResourcePolicy.objects.filter(group__slug="research").update(lending=lending)
    PriorityClass.objects.update_or_create(name="high", defaults={"value": 200})
    running = services.submit(
        user=estate.member, compute_resource=estate.vision_sized, command="train", gpus=3, channel="api"
    )
    place(running.pk, estate.pool)
    for _ in range(2):
        services.submit(user=estate.lead, compute_resource=estate.speech_a100, command="asr", channel="api")
    waiting = services.submit(
        user=estate.member, compute_resource=estate.vision_a100, command="train", channel="api"
    )
    Task.objects.filter(pk=waiting.pk).update(priority=200, verdict=VERDICT)
    return waiting


@pytest.mark.django_db
def test_the_task_api_shows_the_priority_class_and_the_groups_fair_share(estate, api):
    task = fair(estate)
    body = api(estate.member).get(f"/api/v1/tasks/{task.pk}/").json()
    assert body["priority"] == 200 and body["priority_class"] == "high"
    assert body["fair_share"] == {"parent": "research", "borrowed": "1.000", "share": "2.000"}
    assert body["verdict"]["message"] == VERDICT["message"]


@pytest.mark.django_db
def test_below_a_parent_lending_by_queuing_priority_the_fair_share_is_null(estate, api):
    task = fair(estate, lending="priority")
    Task.objects.filter(pk=task.pk).update(priority=150)
    body = api(estate.member).get(f"/api/v1/tasks/{task.pk}/").json()
    assert body["fair_share"] is None and body["priority_class"] is None and body["priority"] == 150


@pytest.mark.django_db(transaction=True)
def test_klique_status_shows_priority_fair_share_and_why_the_task_waits(live_server, estate, tmp_path):
    task = fair(estate)
    env = logged_in(tmp_path, live_server.url, token_for(estate.member))
    text = klique(env, "status", str(task.pk)).stdout
    assert "  priority          200 (high)" in text
    assert "  fair share        vision holds 1 of its fair 2 borrowed GPUs (research shares fairly)" in text
    assert f"  why waiting       {VERDICT['message']}" in text
    body = json.loads(klique(env, "status", str(task.pk), "--json").stdout)
    assert body["fair_share"] == {"parent": "research", "borrowed": "1.000", "share": "2.000"}
    assert body["priority_class"] == "high"
