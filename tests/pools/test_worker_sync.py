"""``POST /api/v1/workers/sync`` (docs/workers.md, "The sync call"): reports, then heartbeat, then
claim, in one call with the semantics of their own endpoints; a refused report is answered in its
place and the others go on; a retried sync changes nothing more; a lost worker claims in the same
sync as its heartbeat; the envelope's errors name their path; a sync that ended work asks the
engine for one pass; and the call stays within a handful of queries."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.pools.models import TaskLog, Worker
from apps.tasks import wake
from apps.tasks.models import Task, TaskEvent
from apps.workers import services as protocol
from tests.factories import PoolFactory
from tests.pools.conftest import sweep_steadily

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

SYNC = "/api/v1/workers/sync"


def sync(client, **body):
    return client.post(SYNC, body, format="json")


def claim_all(worker, n=1):
    return protocol.claim(worker, free=[1000] * 8, free_gpus=None, max_tasks=n, now=timezone.now())


def lose(worker):
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    sweep_steadily(timezone.now() - timedelta(minutes=1), timezone.now())
    worker.refresh_from_db()
    assert worker.state == Worker.State.LOST


def state(task) -> str:
    return Task.objects.values_list("state", flat=True).get(pk=task.pk)


def test_an_empty_sync_answers_every_part_empty(enrol):
    _, client = enrol()
    answer = sync(client)
    assert answer.status_code == 200, answer.content
    assert answer.json() == {"reports": [], "heartbeat": None, "tasks": [], "claim_error": None}


def test_reports_are_done_in_order_then_the_heartbeat_then_the_claim(pool, enrol, place):
    worker, client = enrol(gpus="1")
    first, second = place(pool, 2)
    claim_all(worker)
    answer = sync(
        client,
        reports=[
            {"task": first.pk, "what": "started", "body": {}},
            {"task": first.pk, "what": "log", "body": {"tail": "hello\n"}},
            {"task": first.pk, "what": "exited", "body": {"exit_code": 0}},
        ],
        heartbeat={"tasks": [], "free_gpus": "1"},
        claim={"free_gpus": "1"},
    )
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert [(r["what"], r["state"], r["yours"]) for r in body["reports"]] == [
        ("started", "running", True),
        ("log", "running", True),
        ("exited", "succeeded", False),
    ]
    # The heartbeat came after the exit: no orphan stop for the task it no longer runs.
    assert body["heartbeat"]["commands"] == [] and body["heartbeat"]["state"] == "active"
    # The claim came after the exit freed the worker's only GPU.
    assert [t["id"] for t in body["tasks"]] == [second.pk]
    assert TaskLog.objects.get(task=first).tail == "hello\n"
    kinds = list(first.events.order_by("pk").values_list("kind", flat=True))
    assert kinds[-2:] == [TaskEvent.Kind.STARTED, TaskEvent.Kind.SUCCEEDED]


def test_a_refused_report_does_not_fail_the_others(pool, enrol, place):
    worker, client = enrol()
    mine, theirs_placed = place(pool), place(PoolFactory(name="elsewhere"))
    claim_all(worker)
    answer = sync(
        client,
        reports=[
            {"task": 999_999_999, "what": "started"},
            {"task": theirs_placed[0].pk, "what": "exited", "body": {"exit_code": 0}},
            {"task": mine[0].pk, "what": "exited", "body": {"exit_code": "zero"}},
            {"task": mine[0].pk, "what": "started", "body": {}},
        ],
    )
    assert answer.status_code == 200, answer.content
    unknown, other_pool, bad_body, good = answer.json()["reports"]
    assert unknown["status"] == 403 and other_pool["status"] == 403
    assert unknown["error"] == f"Task 999999999 is not a task of pool {pool}."
    assert other_pool["error"] == f"Task {theirs_placed[0].pk} is not a task of pool {pool}."
    assert bad_body["status"] == 400 and "body.exit_code" in bad_body["error"]
    assert good == {"task": mine[0].pk, "what": "started", "state": "running", "yours": True}
    assert state(theirs_placed[0]) == Task.State.PLACED


def test_a_retried_sync_changes_nothing_more(pool, enrol, place):
    worker, client = enrol()
    a, b = place(pool, 2)
    claim_all(worker, 2)
    body = {
        "reports": [
            {"task": a.pk, "what": "started", "body": {}},
            {"task": b.pk, "what": "started", "body": {}},
            {"task": a.pk, "what": "exited", "body": {"exit_code": 1, "log_tail": "boom\n"}},
            {"task": b.pk, "what": "stopped", "body": {}},
        ],
        "heartbeat": {"tasks": []},
    }
    first = sync(client, **body).json()
    events = TaskEvent.objects.count()
    again = sync(client, **body).json()
    assert TaskEvent.objects.count() == events
    assert [r["state"] for r in first["reports"]] == ["running", "running", "failed", "queued"]
    # The retry finds each task where the first sync left it; none is this worker's any more.
    assert [(r["state"], r["yours"]) for r in again["reports"]] == [
        ("failed", False),
        ("queued", False),
        ("failed", False),
        ("queued", False),
    ]
    assert state(a) == Task.State.FAILED and state(b) == Task.State.QUEUED
    assert TaskLog.objects.get(task=a).tail == "boom\n"


def test_a_lost_worker_claims_in_the_sync_that_heartbeats(pool, enrol, place):
    worker, client = enrol()
    lose(worker)
    (task,) = place(pool)
    answer = sync(client, heartbeat={"tasks": []}, claim={"free_gpus": "4"}).json()
    assert answer["claim_error"] is None and [t["id"] for t in answer["tasks"]] == [task.pk]
    worker.refresh_from_db()
    assert worker.state == Worker.State.ACTIVE


def test_a_lost_workers_claim_without_a_heartbeat_is_refused_with_409_in_the_answer(pool, enrol, place):
    worker, client = enrol()
    lose(worker)
    (task,) = place(pool)
    answer = sync(client, claim={"free_gpus": "4"})
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["tasks"] == [] and body["claim_error"]["status"] == 409
    assert "heartbeat" in body["claim_error"]["error"]
    assert state(task) == Task.State.PLACED


def test_a_retired_worker_is_refused_with_401_even_while_its_token_is_cached(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim_all(worker)
    assert sync(client, heartbeat={"tasks": [task.pk]}).status_code == 200  # the token is cached now
    protocol.retire(worker, timezone.now())
    assert sync(client, heartbeat={"tasks": []}).status_code == 401
    assert sync(client, claim={"free_gpus": "4"}).status_code == 401
    exited = {"task": task.pk, "what": "exited", "body": {"exit_code": 0}}
    assert sync(client, reports=[exited]).status_code == 401
    # A report on its own endpoint may still pass the cached token for up to WORKER_CACHE_S, but
    # finds the work requeued by the retirement: nothing changes.
    events = TaskEvent.objects.filter(task=task).count()
    answer = client.post(f"/api/v1/workers/tasks/{task.pk}/exited", {"exit_code": 0}, format="json")
    assert answer.status_code in (200, 401)
    assert state(task) == Task.State.QUEUED and TaskEvent.objects.filter(task=task).count() == events


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ({"reports": {}}, "reports"),
        ({"reports": [{"task": 1, "what": "finished"}]}, "reports[0].what"),
        ({"reports": [{"task": 1, "what": {}}]}, "reports[0].what"),
        ({"reports": [{"task": 1, "what": "log", "body": None}]}, "reports[0].body"),
        ({"reports": [{"task": 2**63, "what": "log"}]}, "reports[0].task"),
        ({"reports": [{"task": 1, "what": "started"}, {"task": "x", "what": "started"}]}, "reports[1].task"),
        ({"reports": [{"task": True, "what": "started"}]}, "reports[0].task"),
        ({"reports": [{"task": 1, "what": "started", "body": []}]}, "reports[0].body"),
        ({"reports": ["started"]}, "reports[0]"),
        ({"heartbeat": {"gpus": "lots"}}, "heartbeat.gpus"),
        ({"heartbeat": []}, "heartbeat"),
        ({"claim": {"max_tasks": 1}}, "claim.slots"),
        ({"claim": {"free_gpus": "4", "max_tasks": 0}}, "claim.max_tasks"),
        ({"pings": []}, "pings"),
    ],
)
def test_envelope_errors_are_400_naming_the_path(enrol, body, path):
    _, client = enrol()
    answer = sync(client, **body)
    assert answer.status_code == 400, answer.content
    assert path in answer.json(), answer.json()


def test_a_sync_carries_at_most_the_setting_of_reports(pool, enrol, place, settings):
    settings.WORKER_SYNC_MAX_REPORTS = 3
    worker, client = enrol()
    (task,) = place(pool)
    claim_all(worker)
    report = {"task": task.pk, "what": "log", "body": {"tail": "x"}}
    answer = sync(client, reports=[report] * 4)
    assert answer.status_code == 400 and "WORKER_SYNC_MAX_REPORTS" in answer.json()["reports"][0]
    assert sync(client, reports=[report] * 3).status_code == 200


def test_a_sync_of_ten_reports_a_heartbeat_and_a_claim_takes_a_bounded_number_of_queries(
    pool, enrol, place, django_assert_max_num_queries
):
    worker, client = enrol(gpus="8")
    running = place(pool, 5)
    claim_all(worker, 5)
    for task in running:
        protocol.report_started(worker, task.pk, now=timezone.now())
    place(pool, 3)
    reports = [{"task": t.pk, "what": "log", "body": {"tail": "..."}} for t in running]
    reports += [{"task": t.pk, "what": "exited", "body": {"exit_code": 0}} for t in running]
    # The five log tails in one upsert; each exit is apps.tasks.services.finish (its savepoint, the
    # interval's two updates, the task's update, its event): 42 here. The same poll as 12 calls
    # took 108 before sync (bench/worker_sync.py, docs/benchmarks.md).
    with django_assert_max_num_queries(45):
        answer = sync(
            client, reports=reports, heartbeat={"tasks": []}, claim={"free_gpus": "8", "max_tasks": 3}
        )
    assert answer.status_code == 200, answer.content
    assert len(answer.json()["tasks"]) == 3


def test_a_steady_poll_takes_a_handful_of_queries(enrol, django_assert_max_num_queries):
    """A daemon with nothing to report and nothing to claim: the token (the first time), the
    worker's row, its tasks and the claimable index, and the test's savepoint around them."""
    _, client = enrol()
    with django_assert_max_num_queries(6):
        answer = sync(client, heartbeat={"tasks": []}, claim={"free_gpus": "4"})
    assert answer.status_code == 200, answer.content


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_sync_that_ended_work_asks_the_engine_for_one_pass(pool, enrol, place, settings, monkeypatch):
    settings.ENGINE_WAKE_CELERY = False
    worker, client = enrol()
    a, b, c = place(pool, 3)
    claim_all(worker, 3)
    wake.pass_starting()  # the pass the submits asked for
    assert not wake.pass_wanted()
    sync(client, reports=[{"task": a.pk, "what": "started", "body": {}}], heartbeat={"tasks": [a.pk]})
    assert not wake.pass_wanted()
    requests = []
    real = wake._request_now
    monkeypatch.setattr(wake, "_request_now", lambda: (requests.append(1), real()))
    answer = sync(
        client,
        reports=[
            {"task": a.pk, "what": "exited", "body": {"exit_code": 0}},
            {"task": b.pk, "what": "stopped", "body": {}},
            {"task": c.pk, "what": "start_failed", "body": {"error": "no"}},
        ],
    )
    assert answer.status_code == 200, answer.content
    assert requests == [1] and wake.pass_wanted()


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_each_report_endpoint_that_ends_work_asks_for_a_pass(pool, enrol, place, settings):
    settings.ENGINE_WAKE_CELERY = False
    worker, client = enrol()
    (task,) = place(pool)
    claim_all(worker)
    wake.pass_starting()
    assert client.post(f"/api/v1/workers/tasks/{task.pk}/started", {}, format="json").status_code == 200
    assert not wake.pass_wanted()
    answer = client.post(f"/api/v1/workers/tasks/{task.pk}/exited", {"exit_code": 0}, format="json")
    assert answer.status_code == 200 and wake.pass_wanted()
