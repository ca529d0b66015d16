"""Budget use from usage intervals: UTC calendar periods, running work up to now, disabled
windows not charged, a parent charged for its subtree, burn rate and projected run-out."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.engine.models import DisabledWindow
from apps.ledger.budgets import budget_status, period_bounds
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from tests.factories import ComputeResourceFactory, GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db

# Wednesday 2026-04-15 12:00 UTC
NOW = datetime(2026, 4, 15, 12, 0, tzinfo=UTC)


def test_periods_follow_the_utc_calendar():
    assert period_bounds(NOW, "day") == (datetime(2026, 4, 15, tzinfo=UTC), datetime(2026, 4, 16, tzinfo=UTC))
    assert period_bounds(NOW, "week") == (
        datetime(2026, 4, 13, tzinfo=UTC),
        datetime(2026, 4, 20, tzinfo=UTC),
    )
    assert period_bounds(NOW, "month") == (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))
    assert period_bounds(datetime(2026, 12, 31, 23, 59, tzinfo=UTC), "month")[1] == datetime(
        2027, 1, 1, tzinfo=UTC
    )


def interval(resource, start, end=None, gpus="1", weight=None):
    task_user = UserFactory()
    from apps.tasks.models import Task

    task = Task.objects.create(user=task_user, compute_resource=resource, gpus=gpus, command="x")
    pool = PoolFactory()
    return UsageInterval.objects.create(
        task=task,
        user=task_user,
        policy=resource.policy,
        group=resource.policy.group,
        compute_resource=resource,
        pool=pool,
        gpu_type=pool.gpu_type,
        gpus=Decimal(gpus),
        time_weight=Decimal(weight if weight is not None else resource.profile.time_weight),
        start=start,
        end=end,
    )


@pytest.fixture
def team():
    department = GroupFactory(kind="department")
    team = GroupFactory(parent=department)
    parent = policies.create_policy(
        group=department, reservation=8, limit=16, budget_hours=100, budget_period="day"
    )
    child = policies.create_policy(group=team, reservation=4, limit=16, budget_hours=10, budget_period="day")
    resource = ComputeResourceFactory(policy=child, profile=ProfileFactory(gpus=2, time_weight=2))
    return parent, child, resource


def test_use_is_clipped_to_the_period_and_running_work_counts_up_to_now(team):
    parent, child, resource = team
    day = period_bounds(NOW, "day")[0]
    interval(resource, day - timedelta(hours=3), day + timedelta(hours=1), gpus="2")  # 1 h inside
    interval(resource, NOW - timedelta(minutes=30), None, gpus="2")  # running, 0.5 h
    status = budget_status([child], now=NOW)[child.pk]
    assert status.used_hours == Decimal("3.000")  # 1.5 wall hours x weight 2
    assert status.gpu_hours == Decimal("3.000")  # 1.5 wall hours x 2 GPUs
    assert status.left_hours == Decimal("7.000")
    assert status.burn_rate == 2 and status.gpus_in_use == 2
    assert status.projected_run_out == NOW + timedelta(hours=3.5)
    assert status.resets_at == datetime(2026, 4, 16, tzinfo=UTC)


def test_a_parent_is_charged_for_its_subtree(team):
    parent, child, resource = team
    interval(resource, NOW - timedelta(hours=2), NOW - timedelta(hours=1))
    statuses = budget_status([parent, child], now=NOW)
    assert statuses[parent.pk].used_hours == statuses[child.pk].used_hours == Decimal("2.000")


def test_disabled_engine_windows_are_not_charged(team):
    _, child, resource = team
    interval(resource, NOW - timedelta(hours=4), None)
    DisabledWindow.objects.create(start=NOW - timedelta(hours=3), end=NOW - timedelta(hours=2))
    DisabledWindow.objects.create(start=NOW - timedelta(minutes=30), end=None)
    status = budget_status([child], now=NOW)[child.pk]
    assert status.used_hours == Decimal("5.000")  # (4 - 1 - 0.5) h x weight 2
    assert status.gpu_hours == Decimal("4.000")  # the ledger keeps the real 4 h on 1 GPU


def test_thousands_of_disabled_windows_in_a_period_are_all_taken_out(team):
    """More windows than one query's select list may hold (1,664 on PostgreSQL): the sums go in
    batches and every window is still taken out once."""
    _, child, resource = team
    day = period_bounds(NOW, "day")[0]
    interval(resource, day, None)  # 12 h running since midnight, weight 2
    DisabledWindow.objects.bulk_create(
        DisabledWindow(start=day + timedelta(seconds=20 * i), end=day + timedelta(seconds=20 * i + 10))
        for i in range(1800)
    )  # 1,800 windows of 10 s in the first 10 hours: 5 h disabled
    status = budget_status([child], now=NOW)[child.pk]
    assert status.used_hours == Decimal("14.000")  # (12 - 5) h x weight 2
    assert status.gpu_hours == Decimal("12.000")


def test_used_up_when_nothing_is_left(team):
    _, child, resource = team
    interval(resource, NOW - timedelta(hours=6), NOW - timedelta(hours=1))
    status = budget_status([child], now=NOW)[child.pk]
    assert status.used_up and status.left_hours == 0 and status.projected_run_out is None
    assert status.over_threshold


def test_weight_zero_work_spends_no_budget(team):
    _, child, resource = team
    interval(resource, NOW - timedelta(hours=6), None, weight="0")
    status = budget_status([child], now=NOW)[child.pk]
    assert status.used_hours == 0 and status.burn_rate == 0 and not status.used_up


def _status(**changes):
    from dataclasses import replace

    from apps.ledger.budgets import BudgetStatus

    now = datetime(2026, 12, 20, tzinfo=UTC)
    base = BudgetStatus(
        policy_id=1, has_budget=True, period="month", period_start=datetime(2026, 12, 1, tzinfo=UTC),
        resets_at=datetime(2027, 1, 1, tzinfo=UTC), budget_hours=Decimal(100), used_hours=Decimal(90),
        left_hours=Decimal(10), burn_rate=Decimal(1), projected_run_out=now + timedelta(hours=10),
        alert_threshold=80, used_up=False, gpu_hours=Decimal(90), gpus_in_use=Decimal(1),
    )  # fmt: skip
    return replace(base, **changes)


@pytest.mark.parametrize(
    "changes, text",
    [
        ({}, "projected to run out at 2026-12-20 10:00 UTC"),
        ({"projected_run_out": datetime(2027, 2, 6, tzinfo=UTC)}, "lasts until reset 2027-01-01 00:00 UTC"),
        ({"projected_run_out": datetime(2027, 1, 1, tzinfo=UTC)}, "lasts until reset 2027-01-01 00:00 UTC"),
        ({"projected_run_out": None, "burn_rate": Decimal(0)}, "not burning now"),
        ({"used_up": True, "left_hours": Decimal(0)}, "used up; resets 2027-01-01 00:00 UTC"),
        ({"has_budget": False}, "no budget"),
    ],
)
def test_a_run_out_at_or_after_the_reset_is_no_run_out(changes, text):
    assert _status(**changes).run_out_text() == text
