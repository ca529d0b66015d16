"""Issue 37 part 4: a running task's owner reports its checkpoint over the API
(POST /api/v1/tasks/<id>/checkpoint/) and the SDK (``report_checkpoint``); a time in the future or
before the current run's start answers 400 naming ``at``; another member's task is 404, a lead's
view of it 403 (only the owner or its worker reports)."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.tasks import services
from apps.tasks.models import Task
from klique.client import Client
from tests.channels.conftest import token_for

pytestmark = pytest.mark.django_db


def running_task(user, resource, started_ago=timedelta(hours=1)) -> Task:
    task = services.submit(user=user, compute_resource=resource, command="run")
    started = timezone.now() - started_ago
    Task.objects.filter(pk=task.pk).update(state="running", placed_at=started, started_at=started)
    return Task.objects.get(pk=task.pk)


def post(client, task, **body):
    return client.post(f"/api/v1/tasks/{task.pk}/checkpoint/", body, format="json")


def test_checkpoint_the_owner_reports_it_and_now_is_the_default(estate, api):
    task = running_task(estate.member, estate.vision_a100)
    at = task.started_at + timedelta(minutes=10)
    response = post(api(estate.member, "sdk"), task, at=at.isoformat())
    assert response.status_code == 200, response.json()
    assert Task.objects.get(pk=task.pk).checkpointed_at == at
    before = timezone.now()
    assert post(api(estate.member), task).status_code == 200
    assert Task.objects.get(pk=task.pk).checkpointed_at >= before


@pytest.mark.parametrize(
    ("shift", "field", "words"),
    [(timedelta(hours=1), "at", "future"), (-timedelta(hours=2), "at", "run's start")],
)
def test_checkpoint_refused_in_the_future_or_before_the_run_naming_the_field(
    estate, api, shift, field, words
):
    task = running_task(estate.member, estate.vision_a100)
    response = post(api(estate.member), task, at=(timezone.now() + shift).isoformat())
    assert response.status_code == 400
    assert any(words in message for message in response.json()[field]), response.json()


def test_checkpoint_of_a_waiting_task_is_refused_and_only_the_owner_reports(estate, api):
    waiting = services.submit(user=estate.member, compute_resource=estate.vision_a100, command="run")
    response = post(api(estate.member), waiting)
    assert response.status_code == 400 and "task" in response.json()
    theirs = running_task(estate.other_member, estate.vision_a100)
    assert post(api(estate.member), theirs).status_code == 404
    speech = running_task(estate.outsider, estate.speech_a100)
    assert post(api(estate.lead), speech).status_code == 403


@pytest.mark.django_db(transaction=True)
def test_checkpoint_through_the_sdk(live_server, estate):
    task = running_task(estate.member, estate.vision_a100)
    at = task.started_at + timedelta(minutes=30)
    with Client(live_server.url, token_for(estate.member)) as sdk:
        assert sdk.report_checkpoint(task.pk, at) == at
    assert Task.objects.get(pk=task.pk).checkpointed_at == at
