"""Several time budget windows: each window's use is metered from the same intervals on its own
UTC period (a parent's including its subtree), in a number of queries that does not grow with the
policies or their windows."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.engine.core import UNITS_PER_HOUR
from apps.ledger.budgets import budget_status, budget_units_used
from apps.policies import services as policies
from apps.policies.models import ResourcePolicy
from apps.policies.selectors import parent_policy_ids
from tests.factories import ComputeResourceFactory, GroupFactory, ProfileFactory
from tests.ledger.test_budgets import NOW, interval

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    """A department with 100 h a day and 1000 a week; its team, 10 h a day and 40 a month, runs
    weight-1 work: 3 h on Monday (this week and month), 1 h today, and 2 h on April 2 (this month,
    not this week)."""
    department = GroupFactory(kind="department")
    parent = policies.create_policy(
        group=department, reservation=8, limit=16, budget_hours=100, budget_period="day"
    )
    policies.set_budget_windows(parent, {"week": Decimal(1000)})
    child = policies.create_policy(
        group=GroupFactory(parent=department), reservation=4, limit=16, budget_hours=10, budget_period="day"
    )
    policies.set_budget_windows(child, {"month": Decimal(40)})
    resource = ComputeResourceFactory(policy=child, profile=ProfileFactory(gpus=1, time_weight=1))
    monday = NOW - timedelta(days=2)
    interval(resource, monday, monday + timedelta(hours=3))
    interval(resource, NOW - timedelta(hours=1), NOW)
    april_2 = NOW - timedelta(days=13)
    interval(resource, april_2, april_2 + timedelta(hours=2))
    return parent, child


def test_each_window_is_metered_on_its_own_period_and_a_parent_on_its_subtree(team):
    parent, child = team
    used = budget_units_used([parent, child], NOW, parent_policy_ids())
    assert used == {
        parent.pk: {"day": 1 * UNITS_PER_HOUR, "week": 4 * UNITS_PER_HOUR},
        child.pk: {"day": 1 * UNITS_PER_HOUR, "month": 6 * UNITS_PER_HOUR},
    }


def test_the_status_has_one_row_per_window_and_sums_them_up(team):
    parent, child = team
    status = budget_status([child], now=NOW)[child.pk]
    rows = [(w.period, w.budget_hours, w.used_hours, w.left_hours, w.resets_at.day) for w in status.windows]
    assert rows == [
        ("day", Decimal(10), Decimal("1.000"), Decimal("9.000"), 16),
        ("month", Decimal(40), Decimal("6.000"), Decimal("34.000"), 1),
    ]
    # the summary is the window with the fewest hours left; used up when any window is
    assert (status.period, status.left_hours, status.used_up) == ("day", Decimal("9.000"), False)
    policies.set_budget_windows(child, {"month": Decimal(6)})
    status = budget_status([child], now=NOW)[child.pk]
    assert (
        status.used_up
        and status.period == "month"
        and [w.used_up for w in status.windows]
        == [
            False,
            True,
        ]
    )


def test_over_threshold_when_any_window_is(team):
    parent, child = team
    policies.set_budget_windows(child, {"month": Decimal("6.5")})  # 92% of the month, 10% of the day
    status = budget_status([child], now=NOW)[child.pk]
    assert [w.over_threshold for w in status.windows] == [False, True] and status.over_threshold


def test_the_status_takes_the_same_queries_whatever_the_windows(team):
    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            budget_status(now=NOW)
        return len(captured.captured_queries)

    few = queries()
    for i, period in enumerate(["day", "week", "month"] * 3):
        policy = policies.create_policy(
            group=GroupFactory(name=f"more-{i}"),
            reservation=0,
            limit=4,
            budget_hours=5,
            budget_period=period,
        )
        others = [p for p in ("day", "week", "month") if p != period]
        policies.set_budget_windows(policy, {p: Decimal(50) for p in others})
        ComputeResourceFactory(policy=policy)
    assert ResourcePolicy.objects.count() == 11
    assert queries() == few
