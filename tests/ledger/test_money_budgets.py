"""Money budget windows: the model's rules (hours or money, one window of each kind per period),
and each window's status from the usage intervals at the effective GPU prices: spent, left, burn
rate, run-out and the alert threshold, exact to the cent."""

from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from apps.ledger.budgets import budget_status, money_status
from apps.policies import services as policies
from apps.policies.models import BudgetWindow
from apps.policies.money_windows import set_money_windows
from apps.pricing.models import Price
from tests.factories import ComputeResourceFactory, GpuTypeFactory, GroupFactory, ProfileFactory
from tests.ledger.test_budgets import NOW, interval

pytestmark = pytest.mark.django_db


@pytest.fixture
def team():
    """A department (20 EUR a month) and its team (10 EUR a day, 100 EUR a month, beside a time
    budget of 10 h a day). The A100 costs 2.50 EUR per GPU-hour until April 13 and 3.00 from April 14
    (and 9.00 USD, which no EUR window sees). The team ran 1 GPU for 2 h on April 2 and 3 h on Monday
    April 13, and runs 2 GPUs since 11:00 today (NOW is Wednesday April 15, 12:00 UTC)."""
    department = GroupFactory(kind="department")
    parent = policies.create_policy(group=department, reservation=8, limit=16)
    child = policies.create_policy(
        group=GroupFactory(parent=department), reservation=4, limit=16, budget_hours=10, budget_period="day"
    )
    set_money_windows(parent, {"month": ("20", "eur")})
    set_money_windows(child, {"day": (Decimal(10), "EUR"), "month": (Decimal(100), "EUR")})
    a100 = GpuTypeFactory()
    Price.objects.create(
        gpu_type=a100, currency="EUR", per_gpu_hour=Decimal("2.50"), effective_from=date(2026, 3, 1)
    )
    Price.objects.create(
        gpu_type=a100, currency="EUR", per_gpu_hour=Decimal("3.00"), effective_from=date(2026, 4, 14)
    )
    Price.objects.create(
        gpu_type=a100, currency="USD", per_gpu_hour=Decimal("9.00"), effective_from=date(2026, 3, 1)
    )
    resource = ComputeResourceFactory(policy=child, profile=ProfileFactory(gpus=1, time_weight=1))
    interval(resource, NOW - timedelta(days=13), NOW - timedelta(days=13, hours=-2))
    interval(resource, NOW - timedelta(days=2), NOW - timedelta(days=2, hours=-3))
    interval(resource, NOW - timedelta(hours=1), None, gpus="2")
    return parent, child


def test_money_status_spent_left_burn_rate_and_run_out_are_exact_at_the_effective_prices(team):
    parent, child = team
    day, month = money_status([child], now=NOW)[child.pk]
    # today: 1 h x 2 GPUs x 3.00; the month adds 2 h x 2.50 (April 2) and 3 h x 2.50 (April 13)
    assert (day.period, day.currency, day.amount, day.spent, day.left) == (
        "day",
        "EUR",
        Decimal("10.0000"),
        Decimal("6.00"),
        Decimal("4.00"),
    )
    assert (month.spent, month.left) == (Decimal("18.50"), Decimal("81.50"))
    assert day.burn_rate == month.burn_rate == Decimal("6.00")  # 2 GPUs x 3.00 EUR per hour now
    assert day.projected_run_out == NOW + timedelta(minutes=40)
    assert day.runs_out_in_period and not day.used_up and not day.over_threshold  # 60 % < 80 %
    assert month.projected_run_out == NOW + timedelta(hours=13, minutes=35)  # 81.50 / 6.00 per hour
    assert month.text() == "budget €100.00/month, spent €18.50, projected to run out at 2026-04-16 01:35 UTC"


def test_money_status_of_a_parent_counts_its_subtree_and_alerts_at_the_threshold(team):
    parent, child = team
    (window,) = money_status([parent], now=NOW)[parent.pk]
    assert (window.spent, window.left) == (Decimal("18.50"), Decimal("1.50"))
    assert window.over_threshold and not window.used_up  # 92.5 % >= 80 %
    set_money_windows(parent, {"month": ("18.50", "EUR")})
    (window,) = money_status([parent], now=NOW)[parent.pk]
    assert window.used_up and window.projected_run_out is None
    assert window.run_out_text() == "used up; resets 2026-05-01 00:00 UTC"


def test_money_status_in_a_currency_without_a_price_spends_nothing(team):
    _, child = team
    set_money_windows(child, {"week": ("50", "SEK")})
    (week,) = money_status([child], now=NOW)[child.pk]
    assert (week.spent, week.burn_rate, week.projected_run_out) == (Decimal("0.00"), 0, None)


def test_money_windows_leave_the_time_budget_alone(team):
    _, child = team
    status = budget_status([child], now=NOW)[child.pk]
    assert [w.period for w in status.windows] == ["day"]  # the money windows are not time windows
    assert status.used_hours == Decimal("1.000")  # 1 h today x time weight 1


def test_money_status_takes_the_same_queries_for_one_policy_or_many(team):
    parent, child = team
    for _ in range(3):
        other = policies.create_policy(group=GroupFactory(parent=parent.group), reservation=0, limit=1)
        set_money_windows(other, {"month": ("5", "EUR")})
    every = list(type(child).objects.all())
    with CaptureQueriesContext(connection) as one:
        money_status([child], now=NOW)
    with CaptureQueriesContext(connection) as many:
        money_status(every, now=NOW)
    assert len(many) == len(one)


def test_model_rule_a_window_has_hours_or_money_never_both_nor_neither(team):
    _, child = team
    for fields in (
        {"hours": 5, "amount": 5, "currency": "EUR"},
        {},
        {"amount": 5},
        {"hours": 5, "currency": "EUR"},
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            BudgetWindow.objects.create(policy=child, period="week", **fields)
    with pytest.raises(ValidationError) as error:
        BudgetWindow(policy=child, period="week", amount=5, currency="E1R").full_clean()
    assert "currency" in error.value.message_dict


def test_model_rule_one_time_and_one_money_window_per_period(team):
    _, child = team
    BudgetWindow.objects.create(policy=child, period="month", hours=40)  # beside the money month
    with pytest.raises(IntegrityError), transaction.atomic():
        BudgetWindow.objects.create(policy=child, period="month", amount=1, currency="USD")
    with pytest.raises(IntegrityError), transaction.atomic():
        BudgetWindow.objects.create(policy=child, period="month", hours=1)


def test_money_status_reads_the_same_figures_from_the_rollups_as_from_the_intervals(team):
    from apps.ledger import rollups

    _, child = team
    live = money_status([child], now=NOW)[child.pk]
    assert rollups.refresh(now=NOW) > 0 and rollups.built_until() is not None
    assert money_status([child], now=NOW)[child.pk] == live


def test_the_meter_alerts_a_money_window_once_at_its_threshold_and_once_used_up(team, monkeypatch):
    from apps.accounts.models import Notification
    from apps.engine import services as engine
    from apps.ledger.models import BudgetAlert

    monkeypatch.setattr("apps.engine.services._alert_recipients", lambda policy: [])
    parent, child = team
    # The department: 18.50 of 20.00 EUR this month, 92.5 %: over its 80 % threshold, not used up.
    assert engine.run_meter(now=NOW) == {"threshold": 1, "used_up": 0}
    alert = BudgetAlert.objects.get(policy=parent)
    assert (alert.period, alert.currency, alert.kind) == ("month", "EUR", "threshold")
    assert (alert.spent, alert.amount, alert.used_hours) == (Decimal("18.5000"), Decimal("20.0000"), None)
    assert engine.run_meter(now=NOW) == {"threshold": 0, "used_up": 0}
    # Half an hour on at 6.00 EUR an hour: 21.50, used up; the team's day: 9.00 of 10.00, over 80 %.
    later = NOW + timedelta(minutes=30)
    assert engine.run_meter(now=later) == {"threshold": 1, "used_up": 1}
    assert set(BudgetAlert.objects.values_list("policy", "period", "currency", "kind")) == {
        (parent.pk, "month", "EUR", "threshold"),
        (parent.pk, "month", "EUR", "used_up"),
        (child.pk, "day", "EUR", "threshold"),
    }
    assert not Notification.objects.exists()
