"""The demo's money budget (issue 37's "done when"): replayed on a virtual clock against the demo
estate and the real engine pass, the Agents team's 3.00 EUR a day is used up within minutes of
its wave, before its 2 budget hours, and its work is stopped for the budget; the team page then
shows the window used up."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from apps.engine import services as engine
from apps.ledger.budgets import budget_status, money_status
from apps.policies.models import ResourcePolicy
from apps.portal import demo
from apps.portal.demo_load import DemoLoad
from apps.tasks.models import Task, TaskEvent

pytestmark = pytest.mark.django_db

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def test_demo_rule_the_agents_money_budget_is_used_up_and_stops_its_work(settings, client):
    settings.LOW_WATERMARK_S = 120  # as `make run` sets it
    demo.seed()
    agents = ResourcePolicy.objects.get(group__slug="agents")
    load = DemoLoad()
    stopped_at = None
    with time_machine.travel(START, tick=False) as clock:
        for second in range(0, 15 * 60, 10):
            now = START + timedelta(seconds=second)
            clock.move_to(now)
            load.tick(second)
            engine.run_pass(now=now)
            stopped = TaskEvent.objects.filter(
                kind=TaskEvent.Kind.PREEMPTED,
                reason=Task.StopReason.BUDGET,
                task__compute_resource__policy=agents,
            )
            if stopped.exists():
                stopped_at = second
                break
        (day,) = money_status([agents], now=now)[agents.pk]
        time_budget = budget_status([agents], now=now)[agents.pk]
    print(f"stopped at {stopped_at} s: spent {day.spent} of {day.amount} EUR, {time_budget.used_hours} h")
    assert stopped_at is not None and stopped_at < 15 * 60, "the Agents' money budget runs out in minutes"
    assert day.used_up and not time_budget.used_up  # the money window stopped it, not the 2 h
    with time_machine.travel(now, tick=False):
        client.force_login(demo_user("it"))
        page = client.get("/teams/agents/").content.decode()
    assert "budget €3.00/day" in page and "none left; " in page and "(used up)" in page


def demo_user(username: str):
    from apps.accounts.models import User

    return User.objects.get(username=username)
