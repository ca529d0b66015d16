"""Issue 35 rules 3 and 4 on the database: a maintenance window preempts the pool's running work at
its start (reason ``maintenance``), which goes back to the front of its queue; nothing is placed
there until it ends; before it, work whose time limit would cross its start waits, with the
verdict naming the pool and the window. A dated quota loan is given back by the engine's first pass
after its date, also after downtime and while the engine is disabled."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.engine import held, loader, services
from apps.policies import loans
from apps.policies import services as policies
from apps.policies.models import QuotaLoan
from apps.pools.services import maintenance
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.engine_live.test_held_snapshot import assert_held_is_fresh
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
H = timedelta(hours=1)


@pytest.fixture
def estate():
    pool = PoolFactory(name="onprem-k8s", capacity=2)
    profile = ProfileFactory(name="gpu-1", gpus=1)
    policies.link_pool(profile, pool)
    policy = policies.create_policy(group=GroupFactory(name="Team", slug="team"), reservation=2, limit=2)
    return pool, profile, policies.connect(policy=policy, profile=profile)


def fresh(task: Task) -> Task:
    return Task.objects.get(pk=task.pk)


@pytest.mark.django_db
def test_maintenance_preempts_at_its_start_requeues_in_front_and_reopens_at_its_end(estate):
    pool, _, resource = estate
    user = UserFactory()
    running = [tasks.submit(user=user, compute_resource=resource, command=f"r{i}") for i in range(2)]
    services.run_pass(now=T0)
    assert {fresh(t).state for t in running} == {Task.State.PLACED}
    waiting = tasks.submit(user=user, compute_resource=resource, command="w", time_limit_s=60)
    maintenance.schedule(pool, starts_at=T0 + H, ends_at=T0 + 2 * H, note="firmware", now=T0)

    services.run_pass(now=T0 + H)
    for task in running:
        task = fresh(task)
        assert task.state == Task.State.QUEUED  # never claimed: back in its queue at once
        assert task.last_preemption_reason == Task.StopReason.MAINTENANCE
    assert TaskEvent.objects.filter(kind=TaskEvent.Kind.PREEMPTED, reason="maintenance").count() == 2
    seqs = [fresh(t).queue_seq for t in (*running, waiting)]
    assert seqs[0] < seqs[1] < seqs[2]  # in front of the work that waited, in their old order

    services.run_pass(now=T0 + H + timedelta(minutes=1))
    verdict = fresh(waiting).verdict
    assert verdict["rule"] == "maintenance" and verdict["pools"] == ["onprem-k8s"]
    assert verdict["message"].startswith(
        "Pool onprem-k8s in maintenance from 2026-05-04 09:00 to 2026-05-04 10:00 UTC"
    )
    assert not Task.objects.filter(state=Task.State.PLACED).exists()

    services.run_pass(now=T0 + 2 * H)
    assert {fresh(t).state for t in running} == {Task.State.PLACED}
    assert fresh(waiting).state == Task.State.QUEUED


@pytest.mark.django_db
def test_before_a_window_work_whose_time_limit_crosses_its_start_waits_and_shorter_work_runs(estate):
    pool, profile, resource = estate
    user = UserFactory()
    maintenance.schedule(pool, starts_at=T0 + H, ends_at=T0 + 2 * H, now=T0)
    long = tasks.submit(user=user, compute_resource=resource, command="long", time_limit_s=7200)
    unlimited = tasks.submit(user=user, compute_resource=resource, command="unlimited")
    short = tasks.submit(user=user, compute_resource=resource, command="short", time_limit_s=3600)
    services.run_pass(now=T0)
    assert fresh(short).state == Task.State.PLACED
    assert fresh(long).state == fresh(unlimited).state == Task.State.QUEUED
    verdict = fresh(long).verdict
    assert verdict["rule"] == "maintenance" and verdict["cause"] == "window_ahead"
    policies.update_profile(profile, unlimited_before_maintenance=True)
    services.run_pass(now=T0 + timedelta(seconds=1))
    assert fresh(unlimited).state == Task.State.PLACED  # the profile allows it: stopped at the start


@pytest.mark.django_db
def test_a_window_ended_early_reopens_the_pool_at_the_next_pass(estate):
    pool, _, resource = estate
    window = maintenance.schedule(pool, starts_at=T0, ends_at=T0 + 5 * H, now=T0)
    task = tasks.submit(user=UserFactory(), compute_resource=resource, command="x")
    services.run_pass(now=T0 + timedelta(minutes=1))
    assert fresh(task).state == Task.State.QUEUED
    maintenance.end_now(window, now=T0 + timedelta(minutes=2))
    services.run_pass(now=T0 + timedelta(minutes=3))
    assert fresh(task).state == Task.State.PLACED


@pytest.mark.django_db
def test_the_held_snapshot_reads_windows_as_a_full_load_does(estate):
    pool, _, resource = estate
    now = timezone.now()
    tasks.submit(user=UserFactory(), compute_resource=resource, command="x", time_limit_s=60)
    held.forget()
    services.run_pass()
    maintenance.schedule(pool, starts_at=now + H, ends_at=now + 2 * H)
    assert_held_is_fresh()
    snapshot = loader.load(now + timedelta(seconds=1)).snapshot
    assert [(w.start, w.end) for w in snapshot.pools[0].maintenance] == [(now + H, now + 2 * H)]
    assert loader.load(now + 3 * H).snapshot.pools[0].maintenance == ()


@pytest.mark.django_db
def test_a_loan_is_given_back_by_the_first_pass_after_its_date_even_with_the_engine_disabled():
    parent = policies.create_policy(group=GroupFactory(name="Dept", slug="dept"), reservation=8, limit=8)
    a = policies.create_policy(
        group=GroupFactory(name="A", slug="a", parent=parent.group), reservation=4, limit=8
    )
    b = policies.create_policy(
        group=GroupFactory(name="B", slug="b", parent=parent.group), reservation=2, limit=8
    )
    loan = loans.lend(
        a, b, what="reservation", amount=Decimal("2"), until=T0 + H, check_permission=False, now=T0
    )
    services.set_engine_enabled(False, at=T0)
    services.run_pass(now=T0 + 30 * timedelta(minutes=1))
    assert QuotaLoan.objects.get().state == QuotaLoan.State.ACTIVE
    services.run_pass(now=T0 + 30 * H)  # the engine was down at the date; disabled now
    loan.refresh_from_db()
    assert loan.state == QuotaLoan.State.ENDED and loan.ended_at == T0 + 30 * H
    a.refresh_from_db()
    b.refresh_from_db()
    assert (a.reservation, b.reservation) == (Decimal("4"), Decimal("2"))
