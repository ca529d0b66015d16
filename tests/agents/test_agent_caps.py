"""An agent's caps: GPUs at once held by the engine's pass (its owner's own work still runs), daily
GPU-hours refusing new work and stopping running work at the sweep, money per month once prices
exist (inert without), and caps that only narrow the owner's group policy."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.accounts import agents
from apps.engine import services as engine
from apps.ledger.agents import agent_spend
from apps.pricing import services as pricing
from apps.tasks import services as tasks
from apps.tasks.models import Task
from apps.tasks.services.agents import enforce_caps

pytestmark = pytest.mark.django_db


def submit(estate, gpus, agent=True, user=None):
    estate.agent.refresh_from_db()  # as each request reads its token's agent afresh
    return tasks.submit(
        user=user or estate.owner,
        compute_resource=estate.resource,
        command="eval",
        gpus=gpus,
        agent=estate.agent if agent else None,
    )


def state(task):
    return Task.objects.get(pk=task.pk)


def test_the_gpus_at_once_cap_holds_the_agents_task_while_the_owners_own_run(estate):
    agents.update_agent(estate.agent, actor=estate.owner, max_gpus=2)
    first, second = submit(estate, 1), submit(estate, 2)
    own = submit(estate, 2, agent=False)
    engine.run_pass()
    assert state(first).state == Task.State.PLACED and state(own).state == Task.State.PLACED
    held = state(second)
    assert held.state == Task.State.QUEUED
    assert held.verdict["rule"] == "agent_cap"
    assert "vera via agent eval-bot" in held.verdict["message"] and "max_gpus" in held.verdict["message"]
    tasks.cancel(state(first))
    engine.run_pass()
    assert state(second).state == Task.State.PLACED  # room under the cap again


def test_the_gpus_at_once_cap_keeps_the_agents_order(estate):
    agents.update_agent(estate.agent, actor=estate.owner, max_gpus=2)
    big, small = submit(estate, 3), submit(estate, 1)
    engine.run_pass()
    assert {state(big).state, state(small).state} == {Task.State.QUEUED}
    assert state(small).verdict["rule"] == "agent_cap"


def test_a_cap_wider_than_the_owners_policy_does_not_widen_it(estate):
    agents.update_agent(estate.agent, actor=estate.owner, max_gpus=16)
    work = [submit(estate, 2) for _ in range(3)]
    engine.run_pass()
    placed = [t for t in work if state(t).state == Task.State.PLACED]
    assert len(placed) == 2  # the team's policy holds 4 GPUs at once, agent or not
    assert state(work[2]).verdict["rule"] == "policy_limit"


MIDDAY = datetime(2026, 12, 15, 12, 0, tzinfo=UTC)


def run_for(estate, hours_ago, gpus=1):
    """An agent's task placed ``hours_ago`` and running since."""
    task = submit(estate, gpus)
    engine.run_pass(now=timezone.now() - timedelta(hours=hours_ago))
    assert state(task).state == Task.State.PLACED
    return task


def test_the_daily_gpu_hour_cap_refuses_new_work_and_the_sweep_stops_running_work(estate, time_machine):
    time_machine.move_to(MIDDAY)  # three hours of today behind it, whatever the hour of the run
    running = run_for(estate, hours_ago=2, gpus=1)
    agents.update_agent(estate.agent, actor=estate.owner, max_gpu_hours_per_day=Decimal("1.5"))
    assert agent_spend([estate.agent.pk])[estate.agent.pk].gpu_hours_today >= Decimal("2")
    with pytest.raises(ValidationError) as refused:
        submit(estate, 1)
    assert "max_gpu_hours_per_day" in refused.value.message_dict
    own = submit(estate, 1, agent=False)  # the owner's own work is not the agent's
    assert enforce_caps() == 1
    assert state(running).state == Task.State.CANCELED
    assert state(own).state == Task.State.QUEUED
    assert enforce_caps() == 0  # nothing left to stop


def test_the_api_refuses_work_over_a_daily_cap_naming_it(estate):
    from tests.agents.conftest import bearer

    agents.update_agent(estate.agent, actor=estate.owner, max_budget_hours_per_day=0)
    answer = bearer(estate.token).post(
        "/api/v1/tasks/", {"compute_resource": estate.resource.name, "command": "x"}, format="json"
    )
    assert answer.status_code == 400 and "max_budget_hours_per_day" in answer.json()


def test_the_money_cap_counts_once_prices_exist_and_is_inert_without(estate, time_machine):
    time_machine.move_to(MIDDAY)
    run_for(estate, hours_ago=2, gpus=2)
    agents.update_agent(estate.agent, actor=estate.owner, max_money_per_month=Decimal("10"))
    spend = agent_spend([estate.agent.pk])[estate.agent.pk]
    assert spend.cost_month is None
    submit(estate, 1)  # no price: the money cap is inert
    pricing.create_price(
        gpu_type=estate.pool.gpu_type, per_gpu_hour=Decimal("3"), effective_from=date(2020, 1, 1), via="api"
    )
    spend = agent_spend([estate.agent.pk])[estate.agent.pk]
    assert spend.cost_month >= Decimal("12") and spend.currency == "EUR"  # 2 GPUs x 2 h x 3 EUR
    with pytest.raises(ValidationError) as refused:
        submit(estate, 1)
    assert "max_money_per_month" in refused.value.message_dict
    assert enforce_caps() >= 1


def test_the_lead_cap_is_a_ceiling_the_owner_cannot_raise(estate):
    agents.update_agent(estate.agent, actor=estate.lead, lead_max_gpus=1)
    agents.update_agent(estate.agent, actor=estate.owner, max_gpus=4)
    estate.agent.refresh_from_db()
    assert estate.agent.cap("max_gpus") == 1
    with pytest.raises(PermissionError):
        agents.update_agent(estate.agent, actor=estate.owner, lead_max_gpus=None)
    first, second = submit(estate, 1), submit(estate, 1)
    engine.run_pass(now=datetime.now(UTC))
    assert [state(first).state, state(second).state] == [Task.State.PLACED, Task.State.QUEUED]
