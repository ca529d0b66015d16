"""The portal's agents page (``/account/agents/``): the owner's agents and, for leads and IT, their
members' agents, with caps in force, spend today and this month, a create form (the token shown
once), a caps form (the owner sets the agent's own caps, a lead or IT the lead caps, a ceiling the
owner cannot raise) and the kill switch."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from apps.accounts import agents
from apps.accounts.models import Agent
from apps.core import throttles


def _cap_form(user, agent: Agent) -> dict | None:
    """The caps this viewer may set on the agent: the owner its own, a lead (or IT) the lead caps;
    each field with its current value."""
    if agent.stopped:
        return None
    if agents.may_manage(user, agent):
        scope, current = "own", {name: getattr(agent, name) for name in Agent.CAPS}
    elif agents.may_lead(user, agent):
        scope, current = "lead", {name: agent.lead_caps.get(name) for name in Agent.CAPS}
    else:
        return None
    fields = [
        {"name": name, "words": agents.CAP_WORDS[name], "value": "" if value is None else value}
        for name, value in current.items()
    ]
    return {"scope": scope, "fields": fields}


def _rows(user) -> list[dict]:
    found = list(agents.agents_visible_to(user))
    usage = agents.usage_of(found)
    return [
        {
            "agent": agent,
            "caps": [
                f"{cap.normalize():f} {agents.CAP_WORDS[name]}"
                for name in Agent.CAPS
                if (cap := agent.cap(name)) is not None
            ],
            "usage": usage.get(agent.pk, {}),
            "may_kill": not agent.stopped
            and (agents.may_manage(user, agent) or agents.may_lead(user, agent)),
            "cap_form": _cap_form(user, agent),
        }
        for agent in found
    ]


@never_cache
@login_required
def agents_page(request):
    raw, errors = None, []
    if request.method == "POST" and (refused := throttles.refused(request, "token")):
        return refused
    if request.method == "POST":
        try:
            _, raw = agents.create_agent(
                owner=request.user,
                name=request.POST.get("name", ""),
                purpose=request.POST.get("purpose", ""),
                **{name: request.POST.get(name) or None for name in Agent.CAPS},
            )
        except ValidationError as error:
            errors = error.messages
    context = {"rows": _rows(request.user), "raw": raw, "errors": errors}
    return render(request, "accounts/agents.html", context, status=201 if raw else 200)


@login_required
@require_POST
def kill_agent(request, pk: int):
    agent = get_object_or_404(agents.agents_visible_to(request.user), pk=pk)
    if not (agents.may_manage(request.user, agent) or agents.may_lead(request.user, agent)):
        messages.error(request, "Only the agent's owner, a lead of the owner's group and IT may stop it.")
        return redirect("accounts:agents")
    agents.kill_agent(agent, actor=request.user)
    messages.success(request, f"Agent {agent.label} is stopped: its tokens are revoked and its work stopped.")
    return redirect("accounts:agents")


@login_required
@require_POST
def set_caps(request, pk: int):
    """The owner's own caps or, for a lead or IT, the lead caps; an empty field: no such cap."""
    agent = get_object_or_404(agents.agents_visible_to(request.user), pk=pk)
    form = _cap_form(request.user, agent)
    if form is None:
        messages.error(request, "Only the agent's owner, a lead of the owner's group and IT set its caps.")
        return redirect("accounts:agents")
    prefix = "lead_" if form["scope"] == "lead" else ""
    values = {f"{prefix}{name}": request.POST.get(name) or None for name in Agent.CAPS}
    try:
        agents.update_agent(agent, actor=request.user, **values)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
    else:
        messages.success(request, f"Caps of {agent.label} saved.")
    return redirect("accounts:agents")
