"""Reports the control plane must never refuse or repeat (docs/workers.md): a log tail holding NUL
or a lone surrogate is stored cleaned (U+FFFD) with the exit it came with; work that could not
start is tried again on the task's pools, then the task ends failed with the reason shown to its
user, after ``WORKER_START_ATTEMPTS`` starts in all, never placed again."""

import json

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from apps.ledger.models import UsageInterval
from apps.pools.models import TaskLog
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from apps.workers import services as protocol

pytestmark = pytest.mark.django_db

E2BIG = "[Errno 7] Argument list too long: '/bin/sh'"


def post_raw(client, task, what, body: dict):
    """Post the JSON as a worker's httpx sends it: NUL and lone surrogates as \\u escapes."""
    return client.post(
        f"/api/v1/workers/tasks/{task.pk}/{what}", data=json.dumps(body), content_type="application/json"
    )


def claim(worker):
    return protocol.claim(worker, free=[1000] * 4, free_gpus=None, max_tasks=1, now=timezone.now())


def fresh(task) -> Task:
    return Task.objects.select_related("compute_resource__policy", "compute_resource__profile").get(
        pk=task.pk
    )


@pytest.mark.parametrize("bad", ["\x00", "\ud800", "\udfff"])
def test_an_exit_whose_log_tail_holds_unstorable_characters_is_recorded_with_the_tail_cleaned(
    pool, enrol, place, bad
):
    worker, client = enrol()
    (task,) = place(pool)
    claim(worker)
    assert post_raw(client, task, "started", {}).status_code == 200
    answer = post_raw(client, task, "exited", {"exit_code": 0, "log_tail": f"a{bad}b\n"})
    assert answer.status_code == 200 and answer.json()["state"] == "succeeded", answer.content
    assert TaskLog.objects.get(task=task).tail == "a\ufffdb\n"
    assert UsageInterval.objects.get(task=task).end == fresh(task).ended_at


@pytest.mark.parametrize(("what", "field"), [("stopped", "log_tail"), ("log", "tail")])
def test_other_reports_store_unstorable_output_cleaned_too(pool, enrol, place, what, field):
    worker, client = enrol()
    (task,) = place(pool)
    claim(worker)
    answer = post_raw(client, task, what, {field: "x\x00y"})
    assert answer.status_code == 200, answer.content
    assert TaskLog.objects.get(task=task).tail == "x\ufffdy"


def test_the_service_stores_a_log_tail_cleaned_whoever_calls_it(pool, enrol, place):
    worker, _ = enrol()
    (task,) = place(pool)
    claim(worker)
    protocol.report_exited(worker, task.pk, exit_code=1, log_tail="a\x00\ud800", now=timezone.now())
    assert TaskLog.objects.get(task=task).tail == "a\ufffd\ufffd"
    assert fresh(task).state == Task.State.FAILED


def test_work_that_cannot_start_is_tried_again_then_fails_with_the_reason_after_the_attempts(
    pool, enrol, place, settings, client
):
    assert settings.WORKER_START_ATTEMPTS == 3
    workers = [enrol(hostname=f"node-{i}") for i in range(3)]
    (task,) = place(pool)
    for attempt, (worker, as_worker) in enumerate(workers, start=1):
        assert [c.task.pk for c in claim(worker)] == [task.pk]
        answer = post_raw(as_worker, task, "start_failed", {"error": E2BIG})
        assert answer.status_code == 200, answer.content
        current = fresh(task)
        if attempt < 3:
            assert current.state == Task.State.QUEUED and current.failure == ""
            assert current.last_preemption_reason == "start_failed"
            lifecycle.place_many([(current, pool)], timezone.now())
    task = fresh(task)
    assert task.state == Task.State.FAILED and task.exit_code is None
    assert task.failure == f"Could not start on worker node-2 (3 of 3 attempts): {E2BIG}"
    assert task.events.filter(kind="start_failed").count() == 3
    failed = task.events.get(kind="failed")
    assert failed.reason == "start_failed" and failed.detail == {"error": E2BIG, "attempts": 3}
    assert not UsageInterval.objects.filter(task=task, end__isnull=True).exists()
    assert UsageInterval.objects.filter(task=task).count() == 3

    owner = APIClient()
    owner.force_authenticate(task.user)
    shown = owner.get(f"/api/v1/tasks/{task.pk}/").json()
    assert shown["state"] == "failed" and E2BIG in shown["failure"]
    assert [p["reason"] for p in shown["preemptions"]] == ["start_failed"] * 4
    client.force_login(task.user)
    page = client.get(reverse("portal:task", args=[task.pk])).content.decode()
    assert "Why it failed" in page and "Argument list too long" in page


def test_a_start_failure_report_is_idempotent_and_only_the_holder_counts(pool, enrol, place):
    worker, client = enrol()
    other, other_client = enrol(hostname="node-2")
    (task,) = place(pool)
    claim(worker)
    assert post_raw(client, task, "start_failed", {"error": E2BIG}).json()["state"] == "queued"
    assert post_raw(client, task, "start_failed", {"error": E2BIG}).json()["state"] == "queued"
    lifecycle.place_many([(fresh(task), pool)], timezone.now())
    claim(worker)
    assert post_raw(other_client, task, "start_failed", {"error": E2BIG}).json() == {
        "task": task.pk,
        "state": "placed",
        "yours": False,
    }
    assert fresh(task).events.filter(kind="start_failed").count() == 1


def test_a_task_canceled_while_it_could_not_start_ends_canceled(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim(worker)
    lifecycle.cancel(fresh(task))
    assert post_raw(client, task, "start_failed", {"error": E2BIG}).json()["state"] == "canceled"


def test_a_start_failure_error_holding_nul_is_kept_cleaned(pool, enrol, place, settings):
    settings.WORKER_START_ATTEMPTS = 1
    worker, client = enrol()
    (task,) = place(pool)
    claim(worker)
    assert post_raw(client, task, "start_failed", {"error": "bad\x00arg"}).status_code == 200
    assert fresh(task).failure.endswith("bad\ufffdarg")
