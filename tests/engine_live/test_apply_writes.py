"""What the applier writes, and in how many statements: verdicts only where they changed, many
of them in a bounded number of statements, placements and preemptions in bulk with the values
each task gets one at a time.

These run on the database DATABASE_URL names: on PostgreSQL the verdicts go through the one
``unnest`` statement, on SQLite through the portable path; the count of statements differs, the
values written do not.
"""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.accounts.models import Notification
from apps.engine import apply, services
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)


def estate(capacity=2, limit=8):
    pool = PoolFactory(name="onprem", capacity=capacity)
    profile = ProfileFactory(name="gpu-1", gpus=1)
    policies.link_pool(profile, pool)
    org = GroupFactory(kind="organisation", name="Org")
    a = policies.create_policy(group=GroupFactory(parent=org, name="A", slug="a"), reservation=0, limit=limit)
    b = policies.create_policy(group=GroupFactory(parent=org, name="B", slug="b"), reservation=0, limit=limit)
    return pool, policies.connect(policy=a, profile=profile), policies.connect(policy=b, profile=profile)


def submit(resource, n):
    user = UserFactory()
    items = [{"compute_resource": resource, "command": f"run {i}"} for i in range(n)]
    created = []
    for start in range(0, n, 1000):
        created += tasks.submit_many(user=user, items=items[start : start + 1000])
    return created


def task_writes(captured) -> list[str]:
    """The statements that wrote tasks' rows or their events."""
    return [
        q["sql"]
        for q in captured
        if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT", "WITH"))
        and ("tasks_task" in q["sql"] or "tasks_taskevent" in q["sql"])
    ]


def verdict_events(task) -> list[str]:
    return list(
        TaskEvent.objects.filter(task=task, kind=TaskEvent.Kind.VERDICT)
        .order_by("pk")
        .values_list("reason", flat=True)
    )


WAITING_FOR_ROOM = {"no_capacity", "behind_higher_priority"}


def test_an_unchanged_verdict_is_not_rewritten():
    pool, ra, rb = estate(capacity=2)
    submit(rb, 5)
    services.run_pass(now=T0)
    waiting = list(Task.objects.filter(state=Task.State.QUEUED))
    stored = waiting[0].verdict
    assert len(waiting) == 3 and stored["rule"] in WAITING_FOR_ROOM
    # the same key with a marked message: a rewrite would replace the mark
    Task.objects.filter(pk__in=[t.pk for t in waiting]).update(verdict={**stored, "message": "mark"})
    with CaptureQueriesContext(connection) as pass_two:
        services.run_pass(now=T0 + timedelta(seconds=1))
    assert not [sql for sql in task_writes(pass_two.captured_queries) if "verdict" in sql]
    assert {Task.objects.get(pk=t.pk).verdict["message"] for t in waiting} == {"mark"}
    assert verdict_events(waiting[0]) == [stored["rule"]]


def test_a_changed_verdict_is_written_with_an_event_when_its_rule_changes():
    pool, ra, rb = estate(capacity=2)
    submit(rb, 3)
    services.run_pass(now=T0)
    (task,) = Task.objects.filter(state=Task.State.QUEUED)
    policies.update_policy(rb.policy, limit=2)
    services.run_pass(now=T0 + timedelta(seconds=1))
    verdict = Task.objects.get(pk=task.pk).verdict
    assert verdict["rule"] == "policy_limit" and verdict["group"] == "B"
    assert verdict["message"] == (
        "B is at its limit: this task would take it above the most GPUs it may hold at once."
    )
    event = TaskEvent.objects.filter(task=task, kind=TaskEvent.Kind.VERDICT).order_by("pk").last()
    assert (event.reason, event.detail, event.at, event.pool_id, event.actor_id) == (
        "policy_limit",
        {"message": verdict["message"]},
        T0 + timedelta(seconds=1),
        None,
        None,
    )


def test_a_new_figure_under_the_same_rule_is_written_without_an_event():
    pool, ra, rb = estate(capacity=2)
    submit(rb, 3)
    policies.update_policy(rb.policy, limit=2)
    services.run_pass(now=T0)
    (task,) = Task.objects.filter(state=Task.State.QUEUED)
    written = task.verdict
    assert written["key"] == "policy_limit||B||||" and verdict_events(task) == ["policy_limit"]
    Task.objects.filter(pk=task.pk).update(verdict={**written, "key": "policy_limit||A|||", "message": "old"})
    services.run_pass(now=T0 + timedelta(seconds=1))
    assert Task.objects.get(pk=task.pk).verdict == written
    assert verdict_events(task) == ["policy_limit"]


def test_many_changed_verdicts_are_written_in_a_bounded_number_of_statements():
    pool, ra, rb = estate(capacity=2)
    submit(rb, 5)
    services.run_pass(now=T0)
    small = list(Task.objects.filter(state=Task.State.QUEUED))
    many = submit(ra, 1200)
    policies.update_policy(rb.policy, limit=2)
    with CaptureQueriesContext(connection) as captured:
        services.run_pass(now=T0 + timedelta(seconds=1))
    writes = [sql for sql in task_writes(captured.captured_queries) if "verdict" in sql]
    if connection.vendor == "postgresql":
        assert len(writes) == 1  # the update and the events, fed from arrays
    else:  # one executemany per chunk of updates, the events in Django's batched inserts
        fields = [f for f in TaskEvent._meta.concrete_fields if not f.primary_key]
        batch = min(apply.CHUNK, connection.ops.bulk_batch_size(fields, [None] * 1203))
        assert len(writes) <= -(-1203 // apply.CHUNK) + -(-1203 // batch) < 1203 / 100
    assert {Task.objects.get(pk=t.pk).verdict["rule"] for t in small} == {"policy_limit"}
    assert {Task.objects.get(pk=t.pk).verdict["rule"] for t in (many[0], many[-1])} == {"no_capacity"}
    verdicts = TaskEvent.objects.filter(kind=TaskEvent.Kind.VERDICT, at=T0 + timedelta(seconds=1))
    assert verdicts.filter(reason="policy_limit").count() == 3
    assert verdicts.filter(reason="no_capacity").count() == 1200


def test_a_task_canceled_after_the_load_gets_no_verdict(monkeypatch):
    pool, ra, rb = estate(capacity=1)
    submit(rb, 1)
    services.run_pass(now=T0 - timedelta(seconds=1))  # the pool is full: the next ones wait for room
    waiting = submit(ra, 2)
    real_load = services.load

    def load_then_cancel(now):
        loaded = real_load(now)
        tasks.cancel(waiting[0], at=now)
        return loaded

    monkeypatch.setattr(services, "load", load_then_cancel)
    services.run_pass(now=T0)
    canceled, kept = (Task.objects.get(pk=t.pk) for t in waiting)
    assert canceled.state == Task.State.CANCELED and canceled.verdict == {}
    assert verdict_events(canceled) == []
    assert kept.verdict["rule"] == "no_capacity" and verdict_events(kept) == ["no_capacity"]


def test_work_preempted_and_requeued_gets_its_verdict_in_the_same_pass():
    pool = PoolFactory(name="onprem", capacity=4)
    profile = ProfileFactory(name="gpu-1", gpus=1)
    policies.link_pool(profile, pool)
    org = GroupFactory(kind="organisation", name="Org")
    a = policies.create_policy(group=GroupFactory(parent=org, name="A", slug="a"), reservation=4, limit=4)
    b = policies.create_policy(group=GroupFactory(parent=org, name="B", slug="b"), reservation=0, limit=4)
    ra, rb = (policies.connect(policy=p, profile=profile) for p in (a, b))
    borrowed = submit(rb, 4)
    services.run_pass(now=T0)
    submit(ra, 2)
    record = services.run_pass(now=T0 + timedelta(seconds=1))
    assert record.preempted == 2
    requeued = [Task.objects.get(pk=t.pk) for t in borrowed[-2:]]
    assert [t.state for t in requeued] == ["queued", "queued"]
    assert {t.verdict["rule"] for t in requeued} <= WAITING_FOR_ROOM
    assert [verdict_events(t) for t in requeued] == [[t.verdict["rule"]] for t in requeued]


def test_placements_and_preemptions_are_written_in_bulk_with_each_tasks_values():
    """As many statements for 30 placements and 30 preemptions as for 3 of each."""

    def run(n):
        pool = PoolFactory(capacity=n)
        profile = ProfileFactory(gpus=1)
        policies.link_pool(profile, pool)
        org = GroupFactory(kind="organisation")
        a = policies.create_policy(group=GroupFactory(parent=org), reservation=n, limit=n)
        b = policies.create_policy(group=GroupFactory(parent=org), reservation=0, limit=n)
        ra, rb = (policies.connect(policy=p, profile=profile) for p in (a, b))
        borrowed = submit(rb, n)
        with CaptureQueriesContext(connection) as placing:
            placed = services.run_pass(now=T0)
        mine = submit(ra, n)
        with CaptureQueriesContext(connection) as preempting:
            reclaimed = services.run_pass(now=T0 + timedelta(seconds=1))
        assert (placed.placed, reclaimed.preempted, reclaimed.placed) == (n, n, n)
        return pool, borrowed, mine, len(placing.captured_queries), len(preempting.captured_queries)

    with transaction.atomic():
        *_, placing_few, preempting_few = run(3)
        transaction.set_rollback(True)
    pool, borrowed, mine, placing_many, preempting_many = run(30)
    assert (placing_many, preempting_many) == (placing_few, preempting_few)
    at = T0 + timedelta(seconds=1)
    for task in Task.objects.filter(pk__in=[t.pk for t in mine]):
        assert (task.state, task.pool_id, task.placed_at, task.verdict) == ("placed", pool.pk, at, {})
        assert list(task.events.filter(at=at).values_list("kind", flat=True)) == ["placed"]
        assert UsageInterval.objects.get(task=task).start == at
    for task in Task.objects.filter(pk__in=[t.pk for t in borrowed]):
        assert (task.state, task.pool_id, task.preemption_count, task.last_preemption_reason) == (
            "queued",
            None,
            1,
            "reclaim",
        )
        kinds = list(task.events.filter(at=at).order_by("pk").values_list("kind", "reason"))
        assert kinds[:2] == [("preempted", "reclaim"), ("requeued", "reclaim")]
        assert kinds[2:] == [("verdict", task.verdict["rule"])] and task.verdict["rule"] in WAITING_FOR_ROOM
        assert UsageInterval.objects.get(task=task).end == at
        assert Notification.objects.filter(
            user_id=task.user_id, kind=Notification.Kind.PREEMPTED, link=f"/work/tasks/{task.pk}/"
        ).exists()
