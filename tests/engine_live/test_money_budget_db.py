"""A money budget window live (issue 37 part 1), on PostgreSQL: the loader gives the core the
window with the ledger's spend so far and the pools' prices; the pass refuses a start by the low
watermark rule and stops the newest paid work, reason budget, naming the window, once the window
is used up. The figures are those of docs/engine.md, "Money budgets"."""

import json
from datetime import date, timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.engine import core, loader, services
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.policies.money_windows import set_money_windows
from apps.pricing.models import Price
from apps.tasks.models import Task, TaskEvent
from tests.engine_live.test_pass import T0, states, submit
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def agents(settings):
    """The Agents team: 20 EUR a day on pool onprem, whose GPU type costs 2.50 EUR a GPU-hour (and
    9.00 USD, which the EUR window does not see), low watermark 15 minutes."""
    settings.LOW_WATERMARK_S = 900
    pool = PoolFactory(name="onprem", capacity=8)
    for currency, price in (("EUR", "2.50"), ("USD", "9.00")):
        Price.objects.create(
            gpu_type=pool.gpu_type,
            currency=currency,
            per_gpu_hour=Decimal(price),
            effective_from=date(2026, 4, 1),
        )
    profile = ProfileFactory(gpus=1)
    policies.link_pool(profile, pool)
    policy = policies.create_policy(group=GroupFactory(name="Agents"), reservation=4, limit=8)
    set_money_windows(policy, {"day": ("20", "EUR")})
    return pool, policies.connect(policy=policy, profile=profile)


def spent_earlier(resource, pool, hours, start):
    """Work of the team that ran earlier today and has ended: 1 GPU for `hours`."""
    user = UserFactory()
    task = Task.objects.create(
        user=user, compute_resource=resource, gpus=1, command="x", state=Task.State.SUCCEEDED
    )
    UsageInterval.objects.create(
        task=task,
        user=user,
        policy=resource.policy,
        group=resource.policy.group,
        compute_resource=resource,
        pool=pool,
        gpu_type=pool.gpu_type,
        gpus=Decimal(1),
        time_weight=Decimal(1),
        start=start,
        end=start + timedelta(hours=hours),
    )


def test_the_loader_gives_the_money_window_its_spend_and_the_pool_rates(agents):
    pool, resource = agents
    spent_earlier(resource, pool, 7, T0 - timedelta(hours=8))  # 7 h x 2.50 = 17.50 EUR today
    (policy,) = [p for p in loader.load(T0).snapshot.policies if p.id == str(resource.policy_id)]
    (budget,) = policy.budgets
    assert (budget.period, budget.currency, budget.rates) == ("day", "EUR", {str(pool.pk): 2_500_000})
    assert (core.units_to_money(budget.limit), core.units_to_money(budget.used)) == (
        Decimal(20),
        Decimal("17.5"),
    )


def test_money_window_low_watermark_refuses_the_fifth_start_then_used_up_stops_the_newest_paid_work(agents):
    pool, resource = agents
    spent_earlier(resource, pool, 7, T0 - timedelta(hours=8))  # 2.50 EUR left today
    tasks = submit(resource, 5)
    services.run_pass(now=T0)
    # The 1st starts (nothing runs); the 2nd to 4th need 0.25 h x 5.00, 7.50, 10.00 = 1.25, 1.875,
    # 2.50 EUR <= 2.50; the 5th needs 0.25 h x 12.50 = 3.125 EUR.
    assert states(tasks) == ["placed"] * 4 + ["queued"]
    verdict = Task.objects.get(pk=tasks[4].pk).verdict
    assert (verdict["rule"], verdict["window"], verdict["money_left"], verdict["money_needed"]) == (
        "budget_start_check",
        "day 20.00 EUR",
        "2.5",
        "3.1",
    )
    assert verdict["message"].startswith("The €20.00 a day of Agents has €2.50 left; starting needs €3.10")
    # 4 GPUs at 2.50 burn 10.00 EUR/h: at 8:16 the team has spent 17.50 + 2.67 > 20.
    services.run_pass(now=T0 + timedelta(minutes=16))
    assert states(tasks) == ["queued"] * 5
    stops = TaskEvent.objects.filter(kind=TaskEvent.Kind.PREEMPTED).order_by("pk")
    assert [(e.task_id, e.reason, e.detail) for e in stops] == [
        (t.pk, "budget", {"window": "day 20.00 EUR"}) for t in reversed(tasks[:4])
    ]
    services.run_pass(now=T0 + timedelta(minutes=17))
    verdict = Task.objects.get(pk=tasks[0].pk).verdict
    assert (verdict["rule"], verdict["window"], verdict["reset_at"]) == (
        "budget_used_up",
        "day 20.00 EUR",
        "2026-05-05T00:00:00+00:00",
    )
    assert verdict["message"] == "The €20.00 a day of Agents is used up; it resets at 2026-05-05 00:00 UTC."


def test_money_windows_load_in_a_number_of_queries_constant_in_the_number_of_windows(agents):
    pool, resource = agents
    estate = loader.load_estate(T0)
    with CaptureQueriesContext(connection) as one:
        loader.assemble(T0, estate, loader.read_tasks())
    for name in ("B", "C", "D"):
        other = policies.create_policy(group=GroupFactory(name=name), reservation=0, limit=8)
        set_money_windows(other, {"day": ("5", "EUR"), "month": ("50", "EUR")})
    estate = loader.load_estate(T0)
    with CaptureQueriesContext(connection) as seven:
        loaded = loader.assemble(T0, estate, loader.read_tasks())
    assert sum(len(p.budgets) for p in loaded.snapshot.policies) == 7
    # One (period, currency) pair more (month EUR) costs its fixed reads; more windows cost nothing.
    for name in ("E", "F"):
        other = policies.create_policy(group=GroupFactory(name=name), reservation=0, limit=8)
        set_money_windows(other, {"day": ("5", "EUR"), "month": ("50", "EUR")})
    estate = loader.load_estate(T0)
    with CaptureQueriesContext(connection) as eleven:
        loader.assemble(T0, estate, loader.read_tasks())
    assert len(eleven) == len(seven) > len(one)


def test_no_money_window_no_money_query(agents):
    pool, resource = agents
    set_money_windows(resource.policy, {})
    estate = loader.load_estate(T0)
    assert estate.money_policies == []
    with CaptureQueriesContext(connection) as queries:
        loader.assemble(T0, estate, loader.read_tasks())
    assert not [q for q in queries if "pricing_" in q["sql"] or "budgetwindow" in q["sql"]]


def test_a_recorded_period_exports_money_windows_and_the_pools_prices_for_the_what_if():
    from datetime import UTC, datetime

    from apps.engine.core.scenario import loads as parse_scenario
    from apps.engine.export import export
    from tests.factories import GpuTypeFactory

    a100 = GpuTypeFactory()
    pool = PoolFactory(gpu_type=a100, capacity=4)
    Price.objects.create(
        gpu_type=a100, currency="EUR", per_gpu_hour=Decimal("2.50"), effective_from=date(2026, 1, 1)
    )
    policy = policies.create_policy(
        group=GroupFactory(), reservation=2, limit=4, budget_hours=10, budget_period="day"
    )
    set_money_windows(policy, {"month": (Decimal(500), "EUR")})
    profile = policies.create_profile(name="a100-1", gpus=Decimal(1), time_weight=Decimal(1), pools=[pool])
    policies.connect(policy=policy, profile=profile)
    scenario = export(datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 11, 2, tzinfo=UTC))
    (row,) = [p for p in scenario["policies"] if p["name"] == policy.group.slug]
    assert row["budgets"] == [
        {"hours": 10, "period": "day"},
        {"amount": 500, "currency": "EUR", "period": "month"},
    ]
    assert scenario["prices"] == {"EUR": {pool.name: 2.5}}
    parse_scenario(json.dumps(scenario))
