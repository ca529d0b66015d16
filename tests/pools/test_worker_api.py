"""Heartbeat, claim and reports: a claim takes the oldest placement that fits the worker's free
GPUs; heartbeats carry stop commands; every report is idempotent; a worker token acts for its
own pool only; bad input is 400 naming the field."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.ledger.models import UsageInterval
from apps.pools.models import TaskLog, Worker
from apps.tasks import selectors
from apps.tasks import services as lifecycle
from apps.tasks.models import Task, TaskEvent
from apps.workers import services as protocol
from apps.workers.api import serializers
from tests.factories import PoolFactory
from tests.pools.conftest import sweep_steadily

pytestmark = pytest.mark.django_db

HEARTBEAT, CLAIM = "/api/v1/workers/heartbeat", "/api/v1/workers/claim"


def report(client, task, what, **body):
    return client.post(f"/api/v1/workers/tasks/{task.pk}/{what}", body, format="json")


def claim_one(worker, task_count=1):
    return protocol.claim(worker, free=[1000] * 8, free_gpus=None, max_tasks=task_count, now=timezone.now())


def test_a_claim_takes_the_oldest_placement_then_queue_order(pool, enrol, place):
    _, client = enrol()
    t0 = timezone.now() - timedelta(seconds=30)
    later = place(pool, 2, at=t0 + timedelta(seconds=5))
    first = place(pool, 2, at=t0)
    answer = client.post(CLAIM, {"slots": ["1", "1", "1", "1"], "max_tasks": 3}, format="json")
    assert answer.status_code == 200, answer.content
    ids = [t["id"] for t in answer.json()["tasks"]]
    assert ids == [first[0].pk, first[1].pk, later[0].pk]
    assert [t["slots"] for t in answer.json()["tasks"]] == [[0], [1], [2]]


def test_a_claim_only_takes_what_fits_the_free_gpus(pool, enrol, place):
    worker, client = enrol(gpus="2")
    big = place(pool, 1, gpus="2")
    small = place(pool, 2, gpus="0.5")
    answer = client.post(CLAIM, {"slots": ["1", "0.6"], "max_tasks": 5}, format="json").json()
    assert [(t["id"], t["slots"]) for t in answer["tasks"]] == [(small[0].pk, [1]), (small[1].pk, [0])]
    big[0].refresh_from_db()
    assert big[0].worker is None
    answer = client.post(CLAIM, {"free_gpus": "2"}, format="json").json()
    assert [(t["id"], t["slots"], t["gpus"]) for t in answer["tasks"]] == [(big[0].pk, [], "2.000")]


def test_a_fraction_shares_a_gpu_and_leaves_whole_ones_free(pool, enrol, place):
    _, client = enrol()
    place(pool, 1, gpus="0.25")
    answer = client.post(CLAIM, {"slots": ["1", "0.5", "1"]}, format="json").json()
    assert answer["tasks"][0]["slots"] == [1]


def test_a_claim_records_which_worker_took_the_task_and_keeps_it_placed(pool, enrol, place):
    worker, client = enrol("gpu-07")
    (task,) = place(pool)
    task_json = client.post(CLAIM, {"free_gpus": "1"}, format="json").json()["tasks"][0]
    assert task_json["command"] == task.command and task_json["checkpoint"] is False
    task.refresh_from_db()
    assert task.state == Task.State.PLACED and task.worker == worker and task.claimed_at is not None
    event = task.events.get(kind=TaskEvent.Kind.CLAIMED)
    assert event.detail == {"worker": "gpu-07", "worker_id": worker.pk} and event.pool == pool


def test_a_worker_never_claims_another_pools_work(pool, enrol, place):
    _, client = enrol()
    place(PoolFactory(name="cloud"), 3)
    assert client.post(CLAIM, {"free_gpus": "4", "max_tasks": 10}, format="json").json() == {"tasks": []}


def test_claimed_or_stopping_tasks_are_not_claimed_again(pool, enrol, place):
    a, _ = enrol("a")
    _, client_b = enrol("b")
    place(pool, 1)
    assert len(claim_one(a)) == 1
    assert client_b.post(CLAIM, {"free_gpus": "4"}, format="json").json() == {"tasks": []}


@pytest.mark.parametrize(
    "body, field",
    [
        ({}, "slots"),
        ({"slots": ["1"], "free_gpus": "1"}, "slots"),
        ({"slots": ["1.5"]}, "slots"),
        ({"slots": ["-0.5"]}, "slots"),
        ({"slots": "1,1"}, "slots"),
        ({"free_gpus": "0.0001"}, "free_gpus"),
        ({"free_gpus": "1", "max_tasks": 0}, "max_tasks"),
        ({"free_gpus": "1", "max_tasks": 1000}, "max_tasks"),
    ],
)
def test_bad_claims_are_400_naming_the_field(enrol, body, field):
    _, client = enrol()
    answer = client.post(CLAIM, body, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.content


def test_a_heartbeat_records_the_worker_and_its_gpus(enrol):
    worker, client = enrol()
    stats = [{"index": 0, "utilization_pct": 87, "memory_used_mb": 1200}]
    answer = client.post(
        HEARTBEAT, {"tasks": [], "gpus": "4", "free_gpus": "3", "gpu_stats": stats}, format="json"
    )
    assert answer.status_code == 200 and answer.json()["commands"] == []
    worker.refresh_from_db()
    assert (
        worker.free_gpus == Decimal("3") and worker.gpu_stats == stats and worker.last_heartbeat is not None
    )


def test_a_heartbeat_answers_stop_commands_for_preempted_and_canceled_work(pool, enrol, place):
    worker, client = enrol()
    reclaimed, canceled, running = place(pool, 3)
    claim_one(worker, 3)
    now = timezone.now()
    lifecycle.request_stop_many([Task.objects.get(pk=reclaimed.pk)], Task.StopReason.RECLAIM, now)
    lifecycle.cancel(canceled, at=now)
    ids = [reclaimed.pk, canceled.pk, running.pk]
    answer = client.post(HEARTBEAT, {"tasks": ids}, format="json").json()
    commands = answer["commands"]
    assert sorted(commands, key=lambda c: c["stop"]) == [
        {"stop": reclaimed.pk, "reason": "preempted", "why": "reclaim", "grace_s": 30},
        {"stop": canceled.pk, "reason": "canceled", "why": "canceled", "grace_s": 30},
    ]
    assert_matches_published_schema(answer, serializers.HeartbeatAnswerSerializer)


def assert_matches_published_schema(answer: dict, serializer_class) -> None:
    """Every key the API answers is one the schema publishes, nested lists of objects too."""
    fields = serializer_class().fields
    assert set(answer) <= set(fields), set(answer) - set(fields)
    for name, value in answer.items():
        child = getattr(fields[name], "child", None)
        if isinstance(value, list) and child is not None and hasattr(child, "fields"):
            for item in value:
                assert set(item) <= set(child.fields), set(item) - set(child.fields)


def test_a_heartbeat_names_orphans_the_worker_must_kill(pool, enrol, place):
    worker, client = enrol()
    other, _ = enrol("other")
    (elsewhere,) = place(pool)
    claim_one(other)
    commands = client.post(HEARTBEAT, {"tasks": [elsewhere.pk, 999999]}, format="json").json()["commands"]
    assert {(c["stop"], c["reason"]) for c in commands} == {(elsewhere.pk, "orphaned"), (999999, "orphaned")}


def test_claimed_work_the_worker_does_not_run_goes_back_to_its_queue(pool, enrol, place):
    worker, client = enrol()
    earlier = timezone.now() - timedelta(seconds=20)
    lost_answer, fresh = place(pool, 2, at=earlier)
    protocol.claim(worker, free=[1000], free_gpus=None, max_tasks=1, now=earlier)
    claim_one(worker)
    client.post(HEARTBEAT, {"tasks": []}, format="json")
    lost_answer.refresh_from_db()
    fresh.refresh_from_db()
    assert lost_answer.state == Task.State.QUEUED and lost_answer.last_preemption_reason == "unclaimed"
    assert fresh.state == Task.State.PLACED and fresh.worker == worker


@pytest.mark.parametrize(
    "body, field",
    [
        ({"tasks": "1,2"}, "tasks"),
        ({"tasks": [0]}, "tasks"),
        ({"tasks": ["x"]}, "tasks"),
        ({"gpus": "-1"}, "gpus"),
        ({"free_gpus": "x"}, "free_gpus"),
        ({"gpu_stats": {"a": 1}}, "gpu_stats"),
        ({"gpu_stats": [{"blob": "x" * 20000}]}, "gpu_stats"),
    ],
)
def test_bad_heartbeats_are_400_naming_the_field(enrol, body, field):
    _, client = enrol()
    answer = client.post(HEARTBEAT, body, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.content


def test_started_then_exited_runs_the_task_to_success_and_closes_its_interval(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim_one(worker)
    answer = report(client, task, "started")
    assert answer.status_code == 200 and answer.json() == {"task": task.pk, "state": "running", "yours": True}
    ended = timezone.now()
    answer = report(client, task, "exited", exit_code=0, at=ended.isoformat(), log_tail="done\n")
    assert answer.json()["state"] == "succeeded"
    task.refresh_from_db()
    assert task.exit_code == 0 and task.ended_at == ended
    assert UsageInterval.objects.get(task=task).end == ended
    kinds = list(task.events.order_by("pk").values_list("kind", flat=True))
    assert kinds == ["submitted", "placed", "claimed", "started", "succeeded"]
    assert TaskLog.objects.get(task=task).tail == "done\n"


def test_every_report_is_idempotent(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim_one(worker)
    for _ in range(2):
        assert report(client, task, "started").json()["state"] == "running"
    for _ in range(2):
        assert report(client, task, "exited", exit_code=3).json() == {
            "task": task.pk,
            "state": "failed",
            "yours": False,
        }
    assert report(client, task, "stopped").json()["state"] == "failed"
    assert report(client, task, "started").json()["state"] == "failed"
    assert task.events.filter(kind=TaskEvent.Kind.STARTED).count() == 1
    assert task.events.filter(kind=TaskEvent.Kind.FAILED).count() == 1


def test_stopped_after_a_stop_command_requeues_the_task_in_its_old_place(pool, enrol, place):
    worker, client = enrol()
    first, second = place(pool, 2)
    claim_one(worker)
    report(client, first, "started")
    lifecycle.request_stop_many([Task.objects.get(pk=first.pk)], Task.StopReason.RECLAIM, timezone.now())
    stopped_at = timezone.now()
    answer = report(client, first, "stopped", at=stopped_at.isoformat())
    assert answer.json() == {"task": first.pk, "state": "queued", "yours": False}
    first.refresh_from_db()
    assert first.preemption_count == 1 and selectors.queue_position(first) == 1
    assert UsageInterval.objects.get(task=first).end == stopped_at
    assert report(client, first, "stopped").json()["state"] == "queued"


def test_a_canceled_task_that_stopped_is_canceled(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim_one(worker)
    lifecycle.cancel(task)
    assert report(client, task, "stopped").json()["state"] == "canceled"


def test_a_failed_exit_while_a_stop_was_asked_for_counts_as_stopped(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim_one(worker)
    lifecycle.request_stop_many([Task.objects.get(pk=task.pk)], Task.StopReason.BUDGET, timezone.now())
    assert report(client, task, "exited", exit_code=143).json()["state"] == "queued"


def test_a_success_while_a_stop_was_asked_for_is_kept_not_run_again(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim_one(worker)
    lifecycle.request_stop_many([Task.objects.get(pk=task.pk)], Task.StopReason.RECLAIM, timezone.now())
    assert report(client, task, "exited", exit_code=0).json()["state"] == "succeeded"
    assert not UsageInterval.objects.filter(task_id=task.pk, end__isnull=True).exists()


def test_stopped_without_a_stop_command_means_the_pool_released_the_work(pool, enrol, place):
    worker, client = enrol(mode="slurm")
    (task,) = place(pool)
    claim_one(worker)
    report(client, task, "started")
    assert report(client, task, "stopped").json()["state"] == "queued"
    task.refresh_from_db()
    assert task.last_preemption_reason == protocol.RELEASED and task.preemption_count == 1


def test_a_worker_cannot_report_or_see_another_pools_task(pool, enrol, place):
    _, client = enrol()
    (foreign,) = place(PoolFactory(name="hpc"))
    for what, body in [
        ("started", {}),
        ("exited", {"exit_code": 0}),
        ("stopped", {}),
        ("log", {"tail": "x"}),
    ]:
        answer = report(client, foreign, what, **body)
        assert answer.status_code == 403, what
        assert str(foreign.command) not in answer.content.decode()
    foreign.refresh_from_db()
    assert foreign.state == Task.State.PLACED


def test_a_missing_task_and_another_pools_task_get_the_same_answer(pool, enrol, place):
    _, client = enrol()
    (foreign,) = place(PoolFactory(name="elsewhere"))
    missing = client.post("/api/v1/workers/tasks/424242/exited", {"exit_code": 0}, format="json")
    other = client.post(f"/api/v1/workers/tasks/{foreign.pk}/exited", {"exit_code": 0}, format="json")
    assert missing.status_code == other.status_code == 403


def test_a_retired_workers_heartbeat_is_refused(pool, enrol):
    worker, client = enrol()
    protocol.retire(worker, timezone.now())
    assert client.post("/api/v1/workers/heartbeat", {"tasks": []}, format="json").status_code == 401
    worker.refresh_from_db()
    assert worker.state == worker.State.RETIRED


def test_a_report_on_a_task_of_another_worker_changes_nothing(pool, enrol, place):
    a, _ = enrol("a")
    _, client_b = enrol("b")
    (task,) = place(pool)
    claim_one(a)
    assert report(client_b, task, "exited", exit_code=0).json() == {
        "task": task.pk,
        "state": "placed",
        "yours": False,
    }


@pytest.mark.parametrize(
    "what, body, field",
    [
        ("exited", {}, "exit_code"),
        ("exited", {"exit_code": "zero"}, "exit_code"),
        ("exited", {"exit_code": 2**40}, "exit_code"),
        ("exited", {"exit_code": 0, "at": "yesterday"}, "at"),
        ("exited", {"exit_code": 0, "log_tail": "x" * 70000}, "log_tail"),
        ("started", {"at": "soon"}, "at"),
        ("started", {"detail": ["slurm"]}, "detail"),
        ("stopped", {"at": 12}, "at"),
        ("log", {}, "tail"),
    ],
)
def test_bad_reports_are_400_naming_the_field(pool, enrol, place, what, body, field):
    worker, client = enrol()
    (task,) = place(pool)
    claim_one(worker)
    answer = report(client, task, what, **body)
    assert answer.status_code == 400 and field in answer.json(), answer.content


def test_reported_times_are_kept_between_the_claim_and_now(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim_one(worker)
    task.refresh_from_db()
    report(client, task, "started", at=(task.claimed_at - timedelta(hours=1)).isoformat())
    report(client, task, "exited", exit_code=0, at=(timezone.now() + timedelta(hours=1)).isoformat())
    task.refresh_from_db()
    assert task.started_at == task.claimed_at
    assert task.ended_at <= timezone.now()


def test_the_log_tail_keeps_the_last_characters(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim_one(worker)
    text = "".join(f"line {i}\n" for i in range(5000))
    assert report(client, task, "log", tail=text).status_code == 200
    assert TaskLog.objects.get(task=task).tail == text[-TaskLog.MAX_CHARS :]


def test_a_lost_worker_that_heartbeats_again_is_active_and_kills_its_old_work(pool, enrol, place):
    worker, client = enrol()
    (task,) = place(pool)
    claim_one(worker)
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    sweep_steadily(timezone.now() - timedelta(minutes=1), timezone.now())
    worker.refresh_from_db()
    assert worker.state == Worker.State.LOST
    commands = client.post(HEARTBEAT, {"tasks": [task.pk]}, format="json").json()["commands"]
    assert commands == [{"stop": task.pk, "reason": "orphaned", "grace_s": 30}]
    worker.refresh_from_db()
    assert worker.state == Worker.State.ACTIVE


def lose(worker):
    """Let ``worker`` fall silent past the heartbeat timeout and sweep as a running control plane
    does: it is marked lost and its work requeued."""
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    sweep_steadily(timezone.now() - timedelta(minutes=1), timezone.now())
    worker.refresh_from_db()
    assert worker.state == Worker.State.LOST


def test_a_lost_worker_cannot_claim_until_it_heartbeats_again(pool, enrol, place):
    worker, client = enrol()
    lose(worker)
    (task,) = place(pool)
    answer = client.post(CLAIM, {"free_gpus": "4"}, format="json")
    assert answer.status_code == 409, answer.content
    assert "heartbeat" in answer.json()["detail"] and "lost" in answer.json()["detail"]
    task.refresh_from_db()
    assert task.state == Task.State.PLACED and task.worker is None
    assert not task.events.filter(kind=TaskEvent.Kind.CLAIMED).exists()
    assert client.post(HEARTBEAT, {"tasks": []}, format="json").status_code == 200
    ids = [t["id"] for t in client.post(CLAIM, {"free_gpus": "4"}, format="json").json()["tasks"]]
    assert ids == [task.pk]


def test_a_claim_reads_the_workers_state_from_the_database_not_from_the_caller(pool, enrol, place):
    worker, _ = enrol()
    (task,) = place(pool)
    Worker.objects.filter(pk=worker.pk).update(state=Worker.State.LOST)
    assert worker.state == Worker.State.ACTIVE  # a stale copy, as a request that raced the sweep holds
    with pytest.raises(protocol.NotActive) as refused:
        claim_one(worker)
    assert refused.value.state == Worker.State.LOST
    task.refresh_from_db()
    assert task.worker is None


def test_a_worker_retired_after_its_token_was_checked_cannot_claim(pool, enrol, place):
    worker, _ = enrol()
    place(pool)
    stale = Worker.objects.get(pk=worker.pk)
    protocol.retire(worker, timezone.now())
    with pytest.raises(protocol.NotActive) as refused:
        claim_one(stale)
    assert refused.value.state == Worker.State.RETIRED
    assert Task.objects.filter(worker=worker).count() == 0


def test_a_retired_workers_claim_is_refused_with_401(pool, enrol, place):
    worker, client = enrol()
    place(pool)
    protocol.retire(worker, timezone.now())
    assert client.post(CLAIM, {"free_gpus": "4"}, format="json").status_code == 401


def test_reports_from_a_lost_worker_on_work_requeued_away_from_it_change_nothing(pool, enrol, place):
    lost, lost_client = enrol("lost")
    other, other_client = enrol("other")
    (task,) = place(pool)
    claim_one(lost)
    report(lost_client, task, "started")
    report(lost_client, task, "log", tail="old run\n")
    lose(lost)
    task.refresh_from_db()
    assert task.state == Task.State.QUEUED and task.last_preemption_reason == "worker_lost"
    lifecycle.place_many([(selectors_task(task), pool)], timezone.now())
    claim_one(other)
    report(other_client, task, "log", tail="new run\n")
    events, intervals = task.events.count(), list(UsageInterval.objects.filter(task=task).values())
    for what, body in [
        ("started", {}),
        ("exited", {"exit_code": 0}),
        ("exited", {"exit_code": 137}),
        ("stopped", {}),
        ("log", {"tail": "old run, later\n"}),
    ]:
        answer = report(lost_client, task, what, **body)
        assert answer.status_code == 200, what
        assert answer.json() == {"task": task.pk, "state": "placed", "yours": False}, what
    task.refresh_from_db()
    assert task.state == Task.State.PLACED and task.worker == other and task.preemption_count == 1
    assert task.events.count() == events
    assert list(UsageInterval.objects.filter(task=task).values()) == intervals
    assert TaskLog.objects.get(task=task).tail == "new run\n"
    commands = lost_client.post(HEARTBEAT, {"tasks": [task.pk]}, format="json").json()["commands"]
    assert commands == [{"stop": task.pk, "reason": "orphaned", "grace_s": 30}]
    task.refresh_from_db()
    assert task.worker == other and task.state == Task.State.PLACED


def test_reports_from_a_lost_worker_on_work_requeued_and_still_waiting_change_nothing(pool, enrol, place):
    lost, client = enrol()
    (task,) = place(pool)
    claim_one(lost)
    report(client, task, "started")
    lose(lost)
    for what, body in [("started", {}), ("exited", {"exit_code": 0}), ("stopped", {})]:
        assert report(client, task, what, **body).json() == {
            "task": task.pk,
            "state": "queued",
            "yours": False,
        }
    task.refresh_from_db()
    assert task.state == Task.State.QUEUED and task.preemption_count == 1


def selectors_task(task) -> Task:
    """The task as the engine loads it to place it."""
    return Task.objects.select_related("compute_resource__policy", "compute_resource__profile").get(
        pk=task.pk
    )
