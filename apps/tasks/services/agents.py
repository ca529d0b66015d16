"""An agent's work held to its caps and its kill switch (docs/governance.md, "Agents").

* At submission (``refusal``): a stopped agent submits nothing; an agent that has used its GPU-hours
  or budget hours of the UTC day, or its money of the UTC month, submits nothing more until the
  period resets (400 naming the cap). Its GPUs at once are held by the engine's pass
  (``apps.engine.agent_caps``).
* The sweep (``enforce_caps``, the Celery task ``klique.tasks.agent_caps``): the queued and
  running work of an agent over a daily or monthly cap is canceled, as its owner would.
* The kill switch (``apps.accounts.agents.kill_agent``) reaches ``stop_work`` through the
  ``agent_stopped`` signal, in its transaction.

A money cap counts only while a price exists (``apps.ledger.agents``); without one it is inert.
"""

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.accounts.models import Agent, Notification
from apps.ledger.agents import AgentSpend, agent_spend
from apps.policies.rules import fmt
from apps.tasks.models import Task
from apps.tasks.services.lifecycle import cancel

SPEND_CAPS = ("max_gpu_hours_per_day", "max_budget_hours_per_day", "max_money_per_month")


def over_caps(agent: Agent, spend: AgentSpend) -> dict[str, str]:
    """The agent's daily and monthly caps it has reached, each with why, by cap name."""
    found = {}
    figures = {
        "max_gpu_hours_per_day": (spend.gpu_hours_today, "GPU-hours today"),
        "max_budget_hours_per_day": (spend.budget_hours_today, "budget hours today"),
        "max_money_per_month": (spend.cost_month, f"{spend.currency} this month"),
    }
    for name in SPEND_CAPS:
        cap, (used, words) = agent.cap(name), figures[name]
        if cap is None or used is None or used < cap:
            continue
        found[name] = (
            f"Agent {agent.label} has reached its cap {name} ({fmt(cap)} {words}; used {fmt(used)}): "
            f"it submits no more work until the period resets or the cap is raised."
        )
    return found


def refusal(agent: Agent, now=None) -> None:
    """Raise a ValidationError naming the cap (or the kill switch) when the agent may not submit."""
    if agent.stopped:
        raise ValidationError({"agent": f"Agent {agent.label} was stopped (kill switch)."})
    if not any(agent.cap(name) is not None for name in SPEND_CAPS):
        return
    reached = over_caps(agent, agent_spend([agent.pk], now)[agent.pk])
    if reached:
        raise ValidationError(reached)


def _work(agent_ids):
    return Task.objects.filter(
        agent_id__in=agent_ids, state__in=[Task.State.QUEUED, *Task.ACTIVE_STATES]
    ).exclude(stop_reason=Task.StopReason.CANCELED)


def stop_work(agent: Agent, *, actor=None, at=None) -> int:
    """Cancel the agent's queued and running work (the task cancel of every channel)."""
    stopped = 0
    for task in _work([agent.pk]).order_by("pk"):
        cancel(task, actor=actor, at=at)
        stopped += 1
    return stopped


def on_agent_stopped(sender, *, agent, actor=None, **kwargs) -> None:
    stop_work(agent, actor=actor)


def capped_agents():
    """Live agents with a daily or monthly cap, their own or a lead's."""
    own = Q()
    for name in SPEND_CAPS:
        own |= Q(**{f"{name}__isnull": False})
    return (
        Agent.objects.filter(stopped_at__isnull=True).filter(own | ~Q(lead_caps={})).select_related("owner")
    )


@transaction.atomic
def enforce_caps(now=None) -> int:
    """The sweep: cancel the work of every agent over a daily or monthly cap; returns tasks stopped."""
    now = now or timezone.now()
    agents = [a for a in capped_agents() if any(a.cap(name) is not None for name in SPEND_CAPS)]
    working = set(_work([a.pk for a in agents]).values_list("agent_id", flat=True))
    agents = [a for a in agents if a.pk in working]
    spends = agent_spend([a.pk for a in agents], now)
    stopped = 0
    for agent in agents:
        reached = over_caps(agent, spends[agent.pk])
        if not reached:
            continue
        count = stop_work(agent, at=now)
        stopped += count
        if count:
            Notification.objects.create(
                user=agent.owner,
                kind=Notification.Kind.AGENT_STOPPED,
                message=" ".join(reached.values()) + f" {count} of its tasks were stopped.",
                link="/account/agents/",
            )
    return stopped
