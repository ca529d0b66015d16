"""The lifecycle writes in bulk (``place_many``, ``request_stop_many``, ``stopped_many``,
``claim_many``, ``mark_started``, ``finish``): every row they write (the task, its event, its usage
interval) holds the values the lifecycle rules give, checked against values worked out here from
the estate, and the number of statements does not grow with the number of tasks.

These run on the database DATABASE_URL names: on PostgreSQL the writes go through statements fed
from arrays (``unnest``), on SQLite through the portable bulk path; the values are the same.
"""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.tasks import services as lifecycle
from apps.tasks.models import Task, TaskEvent
from tests.factories import (
    GpuTypeFactory,
    GroupFactory,
    PoolFactory,
    ProfileFactory,
    ProjectFactory,
    UserFactory,
    WorkerFactory,
)

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)
T2 = T0 + timedelta(minutes=9)


class Estate:
    """Two pools of different GPU types, one profile (time weight 1.5, size from the task) on both,
    two policies of two groups; tasks of two users, half of them in a project."""

    def __init__(self):
        self.pools = [
            PoolFactory(name="east", gpu_type=GpuTypeFactory(name="A100")),
            PoolFactory(name="west", gpu_type=GpuTypeFactory(name="H100")),
        ]
        self.profile = ProfileFactory(name="any", gpus=1, time_weight=Decimal("1.5"), size_from_task=True)
        for pool in self.pools:
            policies.link_pool(self.profile, pool)
        org = GroupFactory(kind="organisation", name="Org")
        self.groups = [GroupFactory(parent=org, name=n, slug=n) for n in ("a", "b")]
        self.resources = [
            policies.connect(
                policy=policies.create_policy(group=group, reservation=0, limit=1000), profile=self.profile
            )
            for group in self.groups
        ]
        self.projects = [ProjectFactory(group=group) for group in self.groups]
        self.users = [UserFactory(), UserFactory()]
        self.workers = [WorkerFactory(pool=pool) for pool in self.pools]

    def submit(self, n: int) -> list[int]:
        """``n`` waiting tasks: sizes 1, 2 and 3 GPUs, every other one in its group's project."""
        ids = []
        for i in range(n):
            side = i % 2
            task = lifecycle.submit(
                user=self.users[side],
                compute_resource=self.resources[side],
                command=f"run {i}",
                gpus=str(1 + i % 3),
                project=self.projects[side] if i % 4 < 2 else None,
            )
            ids.append(task.pk)
        return ids

    def pool_of(self, index: int):
        return self.pools[index % 2]


def loaded(ids) -> list[Task]:
    """The tasks as the engine's apply loads them, in id order."""
    return list(
        Task.objects.select_related("compute_resource__policy", "compute_resource__profile")
        .filter(pk__in=ids)
        .order_by("pk")
    )


def place(estate, ids, at=T0) -> list[Task]:
    tasks = loaded(ids)
    lifecycle.place_many([(t, estate.pool_of(i)) for i, t in enumerate(tasks)], at)
    return tasks


def events(ids, kind) -> dict[int, list[TaskEvent]]:
    out: dict[int, list[TaskEvent]] = {pk: [] for pk in ids}
    for event in TaskEvent.objects.filter(task_id__in=ids, kind=kind).order_by("pk"):
        out[event.task_id].append(event)
    return out


def writes(captured) -> list[str]:
    return [q["sql"] for q in captured if q["sql"].lstrip().upper().startswith(("UPDATE", "INSERT", "WITH"))]


@pytest.fixture
def estate():
    return Estate()


def test_place_many_writes_the_task_its_placed_event_and_its_open_interval(estate):
    """Rule: a placement sets the task placed on its pool at ``at`` (verdict, stop reason and claim
    cleared), logs one ``placed`` event on that pool and opens one interval of its counted GPUs at
    its profile's time weight, attributed to its user, project, policy, group and the pool's type."""
    ids = estate.submit(6)
    Task.objects.filter(pk__in=ids).update(verdict={"rule": "no_capacity"}, stop_reason="x")
    place(estate, ids)
    for i, task in enumerate(Task.objects.filter(pk__in=ids).order_by("pk")):
        pool, side = estate.pool_of(i), i % 2
        assert (task.state, task.pool_id, task.placed_at) == ("placed", pool.pk, T0)
        assert (task.verdict, task.stop_reason, task.worker_id) == ({}, "", None)
        assert (task.claimed_at, task.started_at, task.ended_at) == (None, None, None)
        assert task.gpus == Decimal(1 + i % 3)
        [event] = events([task.pk], "placed")[task.pk]
        assert (event.at, event.pool_id, event.reason, event.actor_id, event.detail) == (
            T0,
            pool.pk,
            "",
            None,
            {},
        )
        [interval] = UsageInterval.objects.filter(task=task)
        assert interval.user_id == estate.users[side].pk
        assert interval.project_id == (estate.projects[side].pk if i % 4 < 2 else None)
        assert interval.policy_id == estate.resources[side].policy_id
        assert interval.group_id == estate.groups[side].pk
        assert interval.compute_resource_id == estate.resources[side].pk
        assert (interval.pool_id, interval.gpu_type_id) == (pool.pk, pool.gpu_type_id)
        assert (interval.gpus, interval.time_weight) == (Decimal(1 + i % 3), Decimal("1.5"))
        assert (interval.start, interval.end, interval.worker_id) == (T0, None, None)


def test_place_many_opens_an_interval_of_gpus_times_nodes():
    """Rule: an interval holds the task's counted GPUs, its GPUs per node times its nodes."""
    pool = PoolFactory(multi_node=True, capacity=16)
    profile = ProfileFactory(gpus=1, size_from_task=True)
    policies.link_pool(profile, pool)
    policy = policies.create_policy(group=GroupFactory(), reservation=0, limit=100)
    resource = policies.connect(policy=policy, profile=profile)
    task = lifecycle.submit(user=UserFactory(), compute_resource=resource, command="x", gpus="4", nodes=3)
    [task] = loaded([task.pk])
    lifecycle.place_many([(task, pool)], T0)
    assert UsageInterval.objects.get(task=task).gpus == Decimal(12)


def test_a_preemption_stops_claimed_work_and_requeues_unclaimed_work_at_once(estate):
    """Rule: a preemption counts on every task (count + 1, last reason) and logs ``preempted``;
    claimed work waits in ``stopping`` with its interval open, unclaimed work holds no GPUs, so it
    is requeued at once (``requeued`` event with the reason, on its old pool) and its interval
    closes at the stop."""
    ids = estate.submit(8)
    tasks = place(estate, ids)
    claimed = [t for i, t in enumerate(tasks) if i < 4]
    for worker in estate.workers:
        lifecycle.claim_many(worker, [t for t in claimed if t.pool_id == worker.pool_id], T0)
    tasks = loaded(ids)
    lifecycle.request_stop_many(tasks, Task.StopReason.RECLAIM, T1)
    preempted, requeued = events(ids, "preempted"), events(ids, "requeued")
    for i, task in enumerate(Task.objects.filter(pk__in=ids).order_by("pk")):
        pool = estate.pool_of(i)
        assert (task.preemption_count, task.last_preemption_reason) == (1, "reclaim")
        [event] = preempted[task.pk]
        assert (event.at, event.pool_id, event.reason, event.actor_id, event.detail) == (
            T1,
            pool.pk,
            "reclaim",
            None,
            {},
        )
        interval = UsageInterval.objects.get(task=task)
        if i < 4:
            assert (task.state, task.stop_reason, task.pool_id) == ("stopping", "reclaim", pool.pk)
            assert task.worker_id == estate.workers[i % 2].pk and task.placed_at == T0
            assert (interval.end, interval.worker_id) == (None, estate.workers[i % 2].pk)
            assert requeued[task.pk] == []
        else:
            assert (task.state, task.stop_reason, task.pool_id, task.worker_id) == ("queued", "", None, None)
            assert (task.placed_at, task.claimed_at, task.started_at, task.ended_at) == (None,) * 4
            [event] = requeued[task.pk]
            assert (event.at, event.pool_id, event.reason) == (T1, pool.pk, "reclaim")
            assert interval.end == T1


def test_a_cancel_or_idle_stop_is_no_preemption_and_names_its_actor_and_detail(estate):
    """Rule: a cancel (or a session's idle stop) does not count as a preemption; its event is
    ``cancel_requested`` (``stop_requested``) with the actor and the detail given; unclaimed work
    canceled ends ``canceled`` at once with a ``canceled`` event."""
    ids = estate.submit(4)
    tasks = place(estate, ids)
    lifecycle.claim_many(estate.workers[0], [tasks[0]], T0)
    actor = estate.users[0]
    lifecycle.request_stop_many(loaded(ids[:2]), Task.StopReason.CANCELED, T1, actor=actor)
    lifecycle.request_stop_many(loaded(ids[2:]), Task.StopReason.IDLE, T1, detail={"limit": "idle_s"})
    rows = {t.pk: t for t in Task.objects.filter(pk__in=ids)}
    assert all(t.preemption_count == 0 and t.last_preemption_reason == "" for t in rows.values())
    assert (rows[ids[0]].state, rows[ids[0]].stop_reason) == ("stopping", "canceled")
    assert (rows[ids[1]].state, rows[ids[1]].ended_at) == ("canceled", T1)
    [event] = events([ids[0]], "cancel_requested")[ids[0]]
    assert (event.actor_id, event.reason, event.detail, event.pool_id) == (
        actor.pk,
        "canceled",
        {},
        estate.pools[0].pk,
    )
    [event] = events([ids[1]], "canceled")[ids[1]]
    assert (event.at, event.reason, event.actor_id, event.pool_id) == (T1, "", None, estate.pools[1].pk)
    for pk in ids[2:]:
        [event] = events([pk], "stop_requested")[pk]
        assert (event.reason, event.detail, event.actor_id) == ("idle", {"limit": "idle_s"}, None)
    assert UsageInterval.objects.get(task_id=ids[1]).end == T1
    assert UsageInterval.objects.get(task_id=ids[0]).end is None


def test_stopped_work_is_requeued_canceled_or_ended_and_charged_until_it_stopped(estate):
    """Rule: when stopping work has stopped its interval closes at ``ended_at`` (never before its
    start); preempted batch work is requeued (``requeued`` event with its stop reason), canceled
    work ends ``canceled`` (``canceled`` event), and a session ends ``canceled`` with its stop
    reason kept (``ended`` event with the reason)."""
    ids = estate.submit(6)
    Task.objects.filter(pk=ids[2]).update(kind=Task.Kind.SESSION)
    tasks = place(estate, ids)
    for worker in estate.workers:
        lifecycle.claim_many(worker, [t for t in tasks if t.pool_id == worker.pool_id], T0)
    lifecycle.request_stop_many(loaded(ids[:3]), Task.StopReason.BUDGET, T1)
    lifecycle.request_stop_many(loaded(ids[3:5]), Task.StopReason.CANCELED, T1)
    lifecycle.request_stop_many(loaded(ids[5:]), Task.StopReason.RECLAIM, T1)
    stopping = loaded(ids)
    lifecycle.stopped_many(stopping[:5], T2, ended_at=T1)
    lifecycle.stopped_many(stopping[5:], T2, ended_at=T0 - timedelta(seconds=3))
    rows = {t.pk: t for t in Task.objects.filter(pk__in=ids)}
    for i, pk in enumerate(ids):
        task, pool = rows[pk], estate.pool_of(i)
        interval = UsageInterval.objects.get(task_id=pk)
        assert interval.end == (T1 if i < 5 else T0)  # never before its start
        if i in (0, 1, 5):
            reason = "reclaim" if i == 5 else "budget"
            assert (task.state, task.pool_id, task.worker_id, task.stop_reason) == ("queued", None, None, "")
            assert (task.placed_at, task.claimed_at, task.started_at, task.ended_at) == (None,) * 4
            [event] = events([pk], "requeued")[pk]
            assert (event.at, event.pool_id, event.reason, event.detail) == (T2, pool.pk, reason, {})
        elif i == 2:
            assert (task.state, task.stop_reason, task.ended_at) == ("canceled", "budget", T2)
            [event] = events([pk], "ended")[pk]
            assert (event.at, event.pool_id, event.reason) == (T2, pool.pk, "budget")
        else:
            assert (task.state, task.stop_reason, task.ended_at) == ("canceled", "canceled", T2)
            [event] = events([pk], "canceled")[pk]
            assert (event.at, event.pool_id, event.reason) == (T2, pool.pk, "")


def test_claims_and_starts_write_the_worker_slots_and_times(estate):
    """Rule: a claim names the worker and its slots on the task, a ``claimed`` event and the open
    interval; a start sets the task running at ``at`` with a ``started`` event."""
    ids = estate.submit(2)
    tasks = place(estate, ids)
    worker = estate.workers[0]
    lifecycle.claim_many(worker, [tasks[0]], T1, [[0, 3]])
    lifecycle.mark_started(tasks[0], T2, detail={"pid": 7})
    task = Task.objects.get(pk=ids[0])
    assert (task.worker_id, task.claimed_at, task.slots) == (worker.pk, T1, [0, 3])
    assert (task.state, task.started_at, task.placed_at) == ("running", T2, T0)
    [event] = events([task.pk], "claimed")[task.pk]
    assert event.detail == {"worker": worker.hostname, "worker_id": worker.pk} and event.at == T1
    [event] = events([task.pk], "started")[task.pk]
    assert (event.detail, event.at, event.pool_id) == ({"pid": 7}, T2, estate.pools[0].pk)
    assert UsageInterval.objects.get(task=task).worker_id == worker.pk
    assert Task.objects.get(pk=ids[1]).worker_id is None


@pytest.mark.parametrize("exit_code", [0, 3])
def test_finish_ends_the_task_with_its_exit_code_and_closes_its_interval(estate, exit_code):
    """Rule: work that ended on its own succeeds with exit code 0 and fails otherwise, with its
    exit code, end time and no stop reason; one ``succeeded``/``failed`` event with the exit code;
    its interval closes at ``at``, or at its start when ``at`` is earlier."""
    ids = estate.submit(2)
    tasks = place(estate, ids)
    lifecycle.claim_many(estate.workers[0], [tasks[0]], T0)
    lifecycle.mark_started(tasks[0], T0)
    lifecycle.finish(tasks[0], exit_code=exit_code, at=T1)
    lifecycle.finish(tasks[1], exit_code=exit_code, at=T0 - timedelta(seconds=1))
    kind = "succeeded" if exit_code == 0 else "failed"
    ends = (T1, T0 - timedelta(seconds=1))
    for task, end in zip(Task.objects.filter(pk__in=ids).order_by("pk"), ends, strict=True):
        assert (task.state, task.exit_code, task.ended_at, task.stop_reason) == (kind, exit_code, end, "")
        assert task.placed_at == T0 and task.pool_id is not None
        [event] = events([task.pk], kind)[task.pk]
        assert (event.at, event.detail, event.reason, event.pool_id) == (
            end,
            {"exit_code": exit_code},
            "",
            task.pool_id,
        )
        assert UsageInterval.objects.get(task=task).end == max(end, T0)


def test_requeue_lost_counts_one_preemption_and_requeues(estate):
    """Rule: lost work counts one preemption for the reason given and goes back to its queue,
    charged until ``ended_at``."""
    ids = estate.submit(2)
    tasks = place(estate, ids)
    lifecycle.claim_many(estate.workers[0], [tasks[0]], T0)
    lifecycle.requeue_lost(loaded(ids), Task.StopReason.WORKER_LOST, T2, ended_at=T1)
    for task in Task.objects.filter(pk__in=ids):
        assert (task.state, task.preemption_count, task.last_preemption_reason) == (
            "queued",
            1,
            "worker_lost",
        )
        assert [e.reason for e in events([task.pk], "requeued")[task.pk]] == ["worker_lost"]
        assert UsageInterval.objects.get(task=task).end == T1


def _statements(fn) -> int:
    with CaptureQueriesContext(connection) as captured, transaction.atomic():
        fn()
    return len(writes(captured.captured_queries))


def _batch_statements(estate, n: int) -> dict[str, int]:
    ids = estate.submit(n)
    counts = {}
    tasks = loaded(ids)
    counts["place"] = _statements(
        lambda: lifecycle.place_many([(t, estate.pool_of(i)) for i, t in enumerate(tasks)], T0)
    )
    half = [t for t in tasks if t.pool_id == estate.pools[0].pk]
    counts["claim"] = _statements(lambda: lifecycle.claim_many(estate.workers[0], half, T0))
    tasks = loaded(ids)
    counts["preempt"] = _statements(lambda: lifecycle.request_stop_many(tasks, "reclaim", T1))
    stopping = [t for t in tasks if t.state == "stopping"]
    counts["stopped"] = _statements(lambda: lifecycle.stopped_many(stopping, T2))
    return counts


def test_bulk_writes_take_a_fixed_number_of_statements_whatever_the_batch(estate):
    """Rule: placing, claiming, preempting and stopping a batch costs the same number of
    statements for 3 tasks as for 60 (on PostgreSQL one per table and step)."""
    small, large = _batch_statements(estate, 3), _batch_statements(estate, 60)
    assert small == large
    if connection.vendor == "postgresql":
        # place: tasks, events, intervals; claim: tasks, intervals, events; preempt: tasks, events,
        # then the unclaimed half requeued at once (intervals, events, tasks); stopped: the same three
        assert large == {"place": 3, "claim": 3, "preempt": 5, "stopped": 3}


def test_finish_takes_a_fixed_number_of_statements(estate):
    """Rule: a task's end costs a fixed number of statements (on PostgreSQL three: its interval,
    its row, its event)."""
    ids = estate.submit(1)
    [task] = place(estate, ids)
    count = _statements(lambda: lifecycle.finish(task, exit_code=0, at=T1))
    assert count == (3 if connection.vendor == "postgresql" else 4)
