"""The live engine on the database: the snapshot loader, the applier, the switch, the lock."""

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection

from apps.engine import core, loader, services
from apps.engine.lock import exclusive_pass
from apps.engine.models import DisabledWindow, PassRecord, PassTotals
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)  # a Monday
PERIODS = ("day", "week", "month")


def estate(capacity=8, res_a=4, res_b=0, limit=8):
    pool = PoolFactory(name="onprem", capacity=capacity)
    profile = ProfileFactory(name="gpu-1", gpus=1)
    policies.link_pool(profile, pool)
    org = GroupFactory(kind="organisation", name="Org")
    a = policies.create_policy(
        group=GroupFactory(parent=org, name="A", slug="a"), reservation=res_a, limit=limit
    )
    b = policies.create_policy(
        group=GroupFactory(parent=org, name="B", slug="b"), reservation=res_b, limit=limit
    )
    return pool, policies.connect(policy=a, profile=profile), policies.connect(policy=b, profile=profile)


def submit(resource, n, user=None):
    user = user or UserFactory()
    return [tasks.submit(user=user, compute_resource=resource, command=f"run {i}") for i in range(n)]


def states(items):
    return [Task.objects.get(pk=t.pk).state for t in items]


def budgeted_resource(profile, period, name):
    group = GroupFactory(name=name, slug=name)
    policy = policies.create_policy(
        group=group, reservation=0, limit=8, budget_hours=100, budget_period=period
    )
    return policies.connect(policy=policy, profile=profile)


def disabled_between(start, end):
    services.set_engine_enabled(False, at=start)
    services.set_engine_enabled(True, at=end)


def test_the_loader_reads_the_whole_state_in_a_constant_number_of_queries(django_assert_max_num_queries):
    """However many tasks, budgeted policies, budget periods and disabled-engine windows there are."""
    pool, ra, rb = estate(capacity=32)
    day = budgeted_resource(ra.profile, "day", "d1")
    submit(ra, 3)
    submit(day, 1)
    disabled_between(T0 - timedelta(hours=3), T0 - timedelta(hours=2, minutes=50))
    with django_assert_max_num_queries(1000) as few:
        small = loader.load(T0)
    # more of everything: budgeted policies of every period kind, windows in the day, the week
    # (Monday is T0's day) and the month, and long queues
    resources = [budgeted_resource(ra.profile, period, f"{period}{i}") for period in PERIODS for i in (2, 3)]
    # further windows on some: one more per period besides their own, read in the same query
    extra = resources[::3]
    for resource in extra:
        other = "month" if resource.policy.budget_period != "month" else "week"
        policies.set_budget_windows(resource.policy, {other: Decimal(1000)})
    for resource in resources:
        submit(resource, 2)
    services.run_pass(now=T0 - timedelta(hours=2))  # the budgeted tasks start 2 h before T0
    disabled_between(T0 - timedelta(hours=1, minutes=30), T0 - timedelta(hours=1, minutes=20))
    disabled_between(T0 - timedelta(minutes=40), T0 - timedelta(minutes=30))
    disabled_between(T0 - timedelta(days=2), T0 - timedelta(days=1))  # last week, this month
    disabled_between(T0 - timedelta(days=40), T0 - timedelta(days=39))  # before the month
    submit(ra, 40)
    submit(rb, 40)
    services.run_pass(now=T0 - timedelta(minutes=10))
    submit(rb, 40)
    with django_assert_max_num_queries(1000) as many:
        big = loader.load(T0)
    # 18: with the read of the agents whose GPUs-at-once cap holds work (apps.engine.agent_caps),
    # the maintenance windows not over (apps.engine.loader._maintenance) and the money windows
    # (apps.engine.loader_money; none of their own reads without one)
    assert len(few.captured_queries) == len(many.captured_queries) <= 18
    core.validate(small.snapshot)
    core.validate(big.snapshot)
    assert len(big.snapshot.placed) == 8 + 8 + 1 + 12  # A and B at their limits, every budgeted task
    assert sum(len(q) for q in big.snapshot.waiting.values()) == 43 + 80 - 16
    # each budgeted task ran 2 h, of which 20 min inside windows: 100 min charged, two tasks each
    charged = 2 * 100 * 60 * 10**6 * 1000
    budgets = {p.id: p.budgets for p in big.snapshot.policies if p.budgets}
    for resource in resources:
        assert [b.used for b in budgets[str(resource.policy_id)]] == [charged] * (1 + (resource in extra)), (
            resource.policy.budget_period
        )


def test_lend_then_reclaim_through_the_database():
    pool, ra, rb = estate()
    borrowed = submit(rb, 8)
    record = services.run_pass(now=T0)
    assert record.placed == 8 and states(borrowed) == ["placed"] * 8
    mine = submit(ra, 4)
    record = services.run_pass(now=T0 + timedelta(seconds=1))
    assert record.preempted == 4 and record.placed == 4
    assert states(mine) == ["placed"] * 4
    # newest placed first: the last four of B's tasks, requeued at once since no worker had them
    assert states(borrowed) == ["placed"] * 4 + ["queued"] * 4
    requeued = Task.objects.get(pk=borrowed[-1].pk)
    assert requeued.preemption_count == 1 and requeued.last_preemption_reason == "reclaim"
    services.run_pass(now=T0 + timedelta(seconds=2))
    assert Task.objects.get(pk=requeued.pk).verdict["rule"] in {"no_capacity", "behind_higher_priority"}
    assert UsageInterval.objects.get(task=requeued).end == T0 + timedelta(seconds=1)
    assert UsageInterval.objects.filter(end__isnull=True).count() == 8
    assert UsageInterval.objects.filter(task=requeued, end__isnull=True).count() == 0


def test_verdicts_are_written_only_when_they_change():
    pool, ra, rb = estate(capacity=2)
    waiting = submit(rb, 5)
    services.run_pass(now=T0)
    first = Task.objects.get(pk=waiting[-1].pk).verdict
    assert first["rule"] == "behind_higher_priority"  # the pool had room when the pass began
    for second in range(1, 4):
        services.run_pass(now=T0 + timedelta(seconds=second))
    held = Task.objects.get(pk=waiting[-1].pk)
    # "no room" and "room taken by higher-priority work" both mean waiting for room: no rewrite
    assert held.verdict == first
    policies.update_policy(rb.policy, limit=Decimal("2"))
    services.run_pass(now=T0 + timedelta(seconds=4))
    held.refresh_from_db()
    assert held.verdict["rule"] == "policy_limit" and "limit" in held.verdict["message"]
    reasons = held.events.filter(kind=TaskEvent.Kind.VERDICT).order_by("pk").values_list("reason", flat=True)
    assert list(reasons) == ["behind_higher_priority", "policy_limit"]


def test_a_task_canceled_after_the_load_is_not_placed(monkeypatch):
    pool, ra, rb = estate()
    (task,) = submit(ra, 1)
    real_load = loader.load

    def load_then_cancel(now):
        loaded = real_load(now)
        tasks.cancel(task, at=now)
        return loaded

    monkeypatch.setattr(services, "load", load_then_cancel)
    record = services.run_pass(now=T0)
    assert record.placed == 0
    assert Task.objects.get(pk=task.pk).state == Task.State.CANCELED
    assert not UsageInterval.objects.exists()


def test_a_disabled_engine_runs_no_pass_and_records_the_window():
    pool, ra, rb = estate()
    submit(ra, 2)
    services.set_engine_enabled(False, at=T0)
    record = services.run_pass(now=T0 + timedelta(seconds=1))
    assert record.skipped and record.skip_reason == "disabled"
    services.set_engine_enabled(True, at=T0 + timedelta(minutes=5))
    window = DisabledWindow.objects.get()
    assert (window.start, window.end) == (T0, T0 + timedelta(minutes=5))
    assert services.run_pass(now=T0 + timedelta(minutes=5)).placed == 2


def test_a_pass_is_skipped_while_another_holds_the_lock():
    estate()
    held, release = threading.Event(), threading.Event()

    def hold():
        with exclusive_pass() as acquired:
            assert acquired
            held.set()
            release.wait(10)
        connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    try:
        record = services.run_pass(now=T0)
    finally:
        release.set()
        holder.join()
    assert record.skipped and record.skip_reason == "another pass running"
    assert not services.run_pass(now=T0).skipped


def test_budget_used_up_preempts_budgeted_work_newest_first():
    pool = PoolFactory(capacity=8)
    profile = ProfileFactory(gpus=1, time_weight=Decimal("1"))
    policies.link_pool(profile, pool)
    policy = policies.create_policy(
        group=GroupFactory(), reservation=4, limit=8, budget_hours=1, budget_period="day"
    )
    resource = policies.connect(policy=policy, profile=profile)
    first, second = submit(resource, 2)
    services.run_pass(now=T0)  # 1 h left lasts 15 min at the rate of two tasks: both start
    assert states([first, second]) == ["placed", "placed"]
    (third,) = submit(resource, 1)
    record = services.run_pass(now=T0 + timedelta(minutes=30, seconds=1))
    assert record.preempted == 2 and record.placed == 0
    preempted = TaskEvent.objects.filter(kind=TaskEvent.Kind.PREEMPTED).order_by("pk")
    assert [e.task_id for e in preempted] == [second.pk, first.pk]
    assert {e.reason for e in preempted} == {"budget"}
    services.run_pass(now=T0 + timedelta(minutes=31))
    verdict = Task.objects.get(pk=third.pk).verdict
    assert verdict["rule"] == "budget_used_up" and verdict["reset_at"] == "2026-05-05T00:00:00+00:00"


def test_every_pass_is_recorded():
    estate()
    services.run_pass(now=T0)
    record = PassRecord.objects.get()
    assert not record.skipped and record.queries > 0 and record.duration_ms >= record.decide_ms
    services.set_engine_enabled(False, at=T0)
    assert services.run_pass(now=T0 + timedelta(seconds=1)).skipped
    totals = {row.name: row.count for row in PassTotals.objects.all()}
    assert totals == {"ran": 1, "skipped: disabled": 1}


def test_a_pass_whose_record_cannot_be_written_applies_none_of_its_decisions(monkeypatch):
    """The decisions and the pass's record are one transaction: an applied pass is never left
    unrecorded (a crash between the two leaves neither)."""
    pool, ra, rb = estate()
    mine = submit(ra, 2)

    def crash(record):
        raise RuntimeError("killed after the apply, before the record")

    with monkeypatch.context() as patch:
        patch.setattr(services, "_count_pass", crash)
        with pytest.raises(RuntimeError):
            services.run_pass(now=T0)
    assert states(mine) == ["queued", "queued"]
    assert not UsageInterval.objects.exists() and not PassRecord.objects.exists()
    assert not TaskEvent.objects.filter(kind=TaskEvent.Kind.PLACED).exists()
    assert services.run_pass(now=T0).placed == 2
    assert PassRecord.objects.get().placed == 2


def test_project_priority_orders_a_queue_before_the_queue_seq():
    from apps.tasks.selectors import queue_positions
    from tests.factories import ProjectFactory

    pool, ra, rb = estate(capacity=1)
    group = ra.policy.group
    routine = ProjectFactory(group=group, name="routine", priority=200)
    urgent = ProjectFactory(group=group, name="urgent", priority=10)
    user = UserFactory()
    first = tasks.submit(user=user, compute_resource=ra, command="a", project=routine)
    plain = tasks.submit(user=user, compute_resource=ra, command="b")
    last = tasks.submit(user=user, compute_resource=ra, command="c", project=urgent)
    assert queue_positions([first, plain, last]) == {last.pk: 1, plain.pk: 2, first.pk: 3}
    services.run_pass(now=T0)
    assert states([last, plain, first]) == ["placed", "queued", "queued"]
    assert queue_positions([first, plain]) == {plain.pk: 1, first.pk: 2}


def test_a_pool_whose_workers_are_all_lost_takes_no_work_until_one_is_back():
    from apps.pools.models import Worker
    from tests.factories import WorkerFactory

    pool, ra, rb = estate(capacity=4)
    spill = PoolFactory(name="spill", capacity=4)
    policies.link_pool(ra.profile, spill)
    worker = WorkerFactory(pool=pool, state=Worker.State.LOST)
    (task,) = submit(ra, 1)
    services.run_pass(now=T0)
    assert Task.objects.get(pk=task.pk).pool == spill
    worker.state = Worker.State.ACTIVE
    worker.save()
    (second,) = submit(ra, 1)
    services.run_pass(now=T0 + timedelta(seconds=1))
    assert Task.objects.get(pk=second.pk).pool == pool
