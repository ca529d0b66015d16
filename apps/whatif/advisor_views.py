"""The quota advisor's pages (docs/whatif.md, "Quota advisor"), mounted by the portal at
``/advisor/``: the proposals, one proposal side by side with its what-if replay, and acceptance
per group as a change request (the proposal's figures, or edited first). Department heads see
their departments' groups, leadership theirs, IT admins all; everyone else gets 403."""

from datetime import UTC, datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from apps.accounts.models import Membership
from apps.accounts.selectors import has_role
from apps.portal.views.common import allow
from apps.whatif import advisor, services
from apps.whatif.models import AdvisorProposal, WhatIfRun
from klique import numbers

REFUSED = "The quota advisor is for department heads, leadership and IT admins."
Role = Membership.Role


def _may_propose(user) -> bool:
    return has_role(user, Role.IT_ADMIN, Role.LEADERSHIP)


def _day(text: str) -> datetime | None:
    try:
        return datetime.strptime(text or "", "%Y-%m-%d").replace(tzinfo=UTC)
    except ValueError:
        return None


@login_required
def proposals(request):
    """The proposals, newest first; IT admins and leadership propose for a chosen period."""
    allow(advisor.may_see_advisor(request.user), REFUSED)
    status, error = 200, ""
    if request.method == "POST":
        allow(_may_propose(request.user), "Only IT admins and leadership ask the advisor for a period.")
        start, end = _day(request.POST.get("start")), _day(request.POST.get("end"))
        if start is None or end is None:
            error = "Give the first day and the day after the last as YYYY-MM-DD."
        else:
            try:
                proposal = advisor.propose(request.user, start, end)
            except services.RunError as refused:
                error = refused.message if refused.field in ("start", "end") else str(refused)
            else:
                messages.success(request, f"{proposal} is replaying.")
                return redirect("portal:advisor-proposal", proposal.pk)
        status = 400
    context = {
        "proposals": AdvisorProposal.objects.select_related("run", "created_by")[:50],
        "may_propose": _may_propose(request.user),
        "error": error,
        "default": advisor.last_month(datetime.now(UTC)),
    }
    return render(request, "whatif/advisor.html", context, status=status)


def _side(report: dict | None, side: str, group: str) -> dict:
    found = ((report or {}).get(side) or {}).get("groups", {}).get(group)
    if not found:
        return {}
    return {
        "p50": numbers.duration(found["wait_median_s"]),
        "p95": numbers.duration(found["wait_p95_s"]),
        "gpu_hours": numbers.hours(found["gpu_hours"]),
        "budget_hours": numbers.hours(found["budget_hours"]),
    }


def shown(row: dict, report: dict | None) -> dict:
    """A group's row as the page shows it: figures through klique.numbers."""
    now, new, m = row["current"], row["proposed"], row["measured"]
    return {
        "group": row["group"],
        "name": row["name"],
        "changed": row["changed"],
        "reasons": row["reasons"],
        "current": [numbers.gpus(now["reservation"]), numbers.gpus(now["limit"]), _budget(now)],
        "proposed": [numbers.gpus(new["reservation"]), numbers.gpus(new["limit"]), _budget(new)],
        "edit": {k: numbers.plain(new[k]) for k in ("reservation", "limit", "budget_hours")},
        "recorded": {
            "gpu_hours": numbers.hours(m["gpu_hours"]),
            "borrowed": numbers.hours(m["borrowed_gpu_hours"]),
            "idle": numbers.hours(m["idle_reserved_gpu_hours"]),
            "start_p95": numbers.duration(m["start_p95_s"]),
            "guarantee": numbers.duration(m["guarantee_start_s"]),
        },
        "base": _side(report, "base", row["group"]),
        "changed_side": _side(report, "changed", row["group"]),
    }


def _budget(values: dict) -> str:
    if values["budget_hours"] is None:
        return "—"
    return f"{numbers.hours(values['budget_hours'])} h per {values['budget_period']}"


def _proposal_or_404(pk: int) -> AdvisorProposal:
    found = AdvisorProposal.objects.select_related("run", "created_by").filter(pk=pk).first()
    if found is None:
        raise Http404("No such proposal.")
    return found


@login_required
def proposal_detail(request, pk: int):
    allow(advisor.may_see_advisor(request.user), REFUSED)
    proposal = _proposal_or_404(pk)
    run = proposal.run
    report = run.report if run is not None and run.state == WhatIfRun.State.DONE else None
    currency, costs = advisor.pool_costs(report, proposal.start)
    pools = [
        {
            "name": name,
            "base": numbers.percent(figures["utilization"]),
            "changed": numbers.percent(report["changed"]["pools"][name]["utilization"]),
            "base_cost": numbers.money(costs[name][0], currency) if name in costs else "no price",
            "changed_cost": numbers.money(costs[name][1], currency) if name in costs else "no price",
        }
        for name, figures in ((report or {}).get("base", {}).get("pools") or {}).items()
    ]
    context = {
        "proposal": proposal,
        "run": run,
        "currency": currency,
        "total_cost": [numbers.money(sum(c[i] for c in costs.values()), currency) for i in (0, 1)],
        "rows": [
            shown(row, report) | {"request": proposal.accepted.get(row["group"])}
            for row in advisor.rows_for(proposal, request.user)
        ],
        "pools": pools,
    }
    return render(request, "whatif/advisor_proposal.html", context)


@require_POST
@login_required
def accept(request, pk: int, slug: str):
    """Accept a group's proposal as a change request: the posted figures (prefilled with the
    proposal's) are what the request asks."""
    allow(advisor.may_see_advisor(request.user), REFUSED)
    proposal = _proposal_or_404(pk)
    values = {k: request.POST.get(k, "").strip() for k in ("reservation", "limit", "budget_hours")}
    try:
        filed = advisor.accept(proposal, request.user, slug, values)
    except PermissionDenied:
        raise
    except ValidationError as refused:
        messages.error(request, " ".join(refused.messages))
        return redirect("portal:advisor-proposal", proposal.pk)
    messages.success(request, f"Change request {filed.pk} filed for {filed.group}.")
    return redirect("portal:advisor-proposal", proposal.pk)
