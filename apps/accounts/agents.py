"""Agents as accountable spenders: create one with its token, change its caps, and the kill switch.

An agent's token is an ``ApiToken`` with ``agent`` set: it authenticates as the owner (whose group
policy applies as to their own work) and names the agent on everything it submits. Who may do what:
the owner manages their agents; a team lead, department head or tenant admin over a group the owner
belongs to (and IT) sees them, sets the lead caps (a ceiling the owner cannot raise) and may kill
them. The kill switch marks the agent stopped, revokes its tokens and, through ``agent_stopped``
(the tasks app stops its queued and running work), all in one transaction.
"""

from decimal import Decimal, InvalidOperation

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.dispatch import Signal
from django.utils import timezone

from apps.accounts import services
from apps.accounts.models import Agent, ApiToken, Membership, Notification, User
from apps.accounts.selectors import cancellable_group_ids

# Sent inside the kill switch's transaction with ``agent`` and ``actor``: the tasks app stops the
# agent's work (``apps.tasks.services.agents``).
agent_stopped = Signal()

# Readers of agents' spend for their pages and the API, registered from AppConfig.ready (the
# ledger's): each takes a list of agents and returns {agent id: {figure: value}}.
USAGE_READERS: list = []

CAP_FIELDS = Agent.CAPS
CAP_WORDS = {
    "max_gpus": "GPUs at once",
    "max_gpu_hours_per_day": "GPU-hours per day",
    "max_budget_hours_per_day": "budget hours per day",
    "max_money_per_month": "money per month",
}


class NameTaken(ValidationError):
    """The owner already has an agent of that name (the API answers 409)."""


def _check_name(owner: User, name: str, agent: Agent | None = None) -> None:
    taken = Agent.objects.filter(owner=owner, name=name).exclude(pk=agent.pk if agent else None)
    if taken.exists():
        raise NameTaken({"name": f"You already have an agent named {name}."})


def agents_visible_to(user: User):
    """The agents the user may see: their own, and for leads (and IT) their members' agents."""
    agents = Agent.objects.select_related("owner", "stopped_by")
    led = cancellable_group_ids(user)
    if led is None:
        return agents
    owners = Membership.objects.filter(group_id__in=led).values("user_id")
    return agents.filter(Q(owner=user) | Q(owner_id__in=owners)).distinct()


def usage_of(agents) -> dict[int, dict]:
    """Each agent's spend figures, from the registered readers."""
    found: dict[int, dict] = {agent.pk: {} for agent in agents}
    for reader in USAGE_READERS:
        for pk, figures in reader(agents).items():
            found.setdefault(pk, {}).update(figures)
    return found


def may_lead(user: User, agent: Agent) -> bool:
    """A lead over a group the owner belongs to, or IT: sets lead caps and may kill it."""
    led = cancellable_group_ids(user)
    if led is None:
        return True
    return agent.owner.memberships.filter(group_id__in=led).exists()


def may_manage(user: User, agent: Agent) -> bool:
    return agent.owner_id == user.pk


def _caps(values: dict) -> dict:
    """The caps given, each a decimal of at least 0 or None (no cap); 400 naming the field."""
    caps = {}
    for name in CAP_FIELDS:
        if name not in values:
            continue
        value = values[name]
        if value in (None, ""):
            caps[name] = None
            continue
        words = CAP_WORDS[name][0].upper() + CAP_WORDS[name][1:]  # "GPUs at once", not "Gpus at once"
        try:
            amount = Decimal(str(value))
        except InvalidOperation as error:
            raise ValidationError({name: f"{words}: give a number or leave it empty."}) from error
        if not amount.is_finite() or amount < 0:
            raise ValidationError({name: f"{words}: give a number of at least 0."})
        caps[name] = amount
    return caps


@transaction.atomic
def create_agent(*, owner: User, name: str, purpose: str = "", **caps) -> tuple[Agent, str]:
    """A new agent and its token; the token itself is returned here and never again."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the agent a name, e.g. eval-bot."})
    _check_name(owner, name)
    agent = Agent(owner=owner, name=name, purpose=purpose or "", **_caps(caps))
    agent.full_clean()
    agent.save()
    return agent, issue_token(agent)


def issue_token(agent: Agent) -> str:
    """A new token for the agent (its earlier ones stay valid until revoked)."""
    if agent.stopped:
        raise ValidationError({"agent": f"Agent {agent.label} was stopped; create a new agent."})
    longest = ApiToken._meta.get_field("name").max_length
    token, raw = services.new_api_token(user=agent.owner, name=f"agent {agent.name}"[:longest])
    token.agent = agent
    token.save()
    return raw


@transaction.atomic
def update_agent(agent: Agent, *, actor: User, **fields) -> Agent:
    """The owner changes the name, purpose and own caps; a lead (or IT) the lead caps
    (``lead_<cap>``). The cap in force is the lower of the two (``Agent.cap``)."""
    agent = Agent.objects.select_for_update(no_key=True).get(pk=agent.pk)
    own = {k: v for k, v in fields.items() if k in ("name", "purpose", *CAP_FIELDS)}
    lead = {k.removeprefix("lead_"): v for k, v in fields.items() if k.startswith("lead_")}
    if own and not may_manage(actor, agent):
        raise PermissionError("Only the agent's owner changes its name, purpose and own caps.")
    if lead and not may_lead(actor, agent):
        raise PermissionError("Only a lead of the owner's group or IT sets an agent's lead caps.")
    for key in ("name", "purpose"):
        if key in own:
            setattr(agent, key, (own[key] or "").strip())
    if not agent.name:
        raise ValidationError({"name": "Give the agent a name, e.g. eval-bot."})
    _check_name(agent.owner, agent.name, agent)
    for key, value in _caps(own).items():
        setattr(agent, key, value)
    caps = dict(agent.lead_caps)
    for key, value in _caps(lead).items():
        if value is None:
            caps.pop(key, None)
        else:
            caps[key] = str(value)
    agent.lead_caps = caps
    agent.full_clean()
    agent.save()
    return agent


@transaction.atomic
def kill_agent(agent: Agent, *, actor: User | None = None, at=None) -> Agent:
    """The kill switch: the agent stopped, its tokens revoked, its queued and running work stopped,
    in one transaction. Calling it again changes nothing more (it stops any work left)."""
    at = at or timezone.now()
    agent = Agent.objects.select_for_update(no_key=True).select_related("owner").get(pk=agent.pk)
    if agent.stopped_at is None:
        agent.stopped_at, agent.stopped_by = at, actor
        agent.save(update_fields=["stopped_at", "stopped_by"])
        if actor is None or actor.pk != agent.owner_id:
            who = f" by {actor.get_username()}" if actor else ""
            Notification.objects.create(
                user=agent.owner,
                kind=Notification.Kind.AGENT_STOPPED,
                message=f"Your agent {agent.name} was stopped{who}: tokens revoked, work stopped.",
                link="/account/agents/",
            )
    services.revoke_api_tokens(agent=agent, at=at)
    agent_stopped.send(sender=Agent, agent=agent, actor=actor)
    return agent
