"""A department head's pages: the department's policies and the quota split."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone

from apps.ledger.budgets import budget_status, money_status
from apps.policies.models import ResourcePolicy
from apps.policies.selectors import child_policies
from apps.policies.services import QuotaChanged, extra_budgets_of
from apps.policies.split import SplitRefused, may_split_quota, split_quota
from apps.portal import access, charts, guarantees, lost_work, selectors
from apps.portal.filters import (
    PolicyFilter,
    QuotaChangeFilter,
)
from apps.portal.forms import quota_forms
from apps.portal.group_tables import QuotaChangeTable, TeamUseTable
from apps.portal.views.common import allow, group_or_404, kept, policy_of, render_page
from apps.tasks.guarantee_selectors import guarantees_of


@login_required
def department(request, slug: str):
    group = group_or_404(slug)
    allow(access.may_see_group(request.user, group), f"You may not see {group}.")
    policy = policy_of(group)
    teams = selectors.child_quotas(policy)
    status = budget_status([policy])[policy.pk]
    money = money_status([policy, *(team.policy for team in teams)])
    names = [team.policy.group.name for team in teams]
    teams_filter = PolicyFilter(
        request.GET, queryset=ResourcePolicy.objects.filter(pk__in=[t.policy.pk for t in teams]), prefix="t"
    )
    changes_filter = QuotaChangeFilter(request.GET, queryset=selectors.quota_changes(group), prefix="c")
    measured = guarantees_of([team.policy for team in teams], *guarantees.bounds("month", timezone.now()))
    context = {
        "group": group,
        "policy": policy,
        "status": status,
        "money_rows": [("", window) for window in money.get(policy.pk, ())],
        "team_money_rows": [
            (team.policy.group.name, window) for team in teams for window in money.get(team.policy.pk, ())
        ],
        "reserved": sum(team.policy.reservation for team in teams),
        "budgeted": sum(team.policy.budget_hours or 0 for team in teams),
        "waiting": sum(team.waiting for team in teams),
        "may_split": may_split_quota(request.user, group) and bool(teams),
        "fair": policy.lending == ResourcePolicy.Lending.FAIR,
        "teams": TeamUseTable(
            kept(teams, teams_filter, lambda t: t.policy.pk),
            prefix="teams-",
            exclude=() if policy.lending == ResourcePolicy.Lending.FAIR else ("fair",),
        ),
        "changes": QuotaChangeTable(changes_filter.qs),
        "teams_filter": teams_filter,
        "changes_filter": changes_filter,
        "guarantee_period": "this month",
        "guarantee_named": True,
        "lost_rows": lost_work.lost_rows(group, *guarantees.bounds("month", timezone.now())),
        "guarantee_rows": [
            guarantees.shown(team.policy.group.name, measured[team.policy.pk]) for team in teams
        ],
        "charts": [
            charts.against(
                "team-gpus",
                "GPUs per team: in use against reservation and limit",
                names,
                {"in use": [team.status.gpus_in_use for team in teams]},
                {
                    "reservation": [team.policy.reservation for team in teams],
                    "limit": [team.policy.limit for team in teams],
                },
                y_title="GPUs",
                empty="No team has a reservation, a limit or GPUs in use.",
            ),
            charts.against(
                "team-hours",
                "Hours per team in the current period: used against the budget",
                names,
                {
                    "GPU-hours": [team.status.gpu_hours for team in teams],
                    "budget hours used": [team.status.used_hours for team in teams],
                },
                {"budget": [team.status.budget_hours for team in teams]},
                y_title="hours",
                figure_of=charts.HOURS,
                empty="No team has used or been given hours in the period.",
            ),
        ],
    }
    return render_page(
        request,
        "portal/department.html",
        context,
        [context["teams"], context["changes"]],
        [teams_filter, changes_filter],
    )


@login_required
def split(request, slug: str):
    group = group_or_404(slug)
    allow(
        may_split_quota(request.user, group),
        f"Only IT and the heads of {group} share out its quota.",
    )
    return split_page(request, group, back=reverse("portal:department", args=[group.slug]))


def split_page(request, group, *, back: str, unit: str = "team"):
    """The quota split of ``group`` among the policies directly below it (the caller checked who
    may); ``back``: where a saved split returns to, ``unit``: what the rows are called."""
    policy = policy_of(group)
    children = sorted(child_policies(policy), key=lambda child: child.group.name)
    forms = quota_forms(children, request.POST or None)
    status = 200
    if request.method == "POST":
        if all(form.is_valid() for form in forms):
            values = {form.policy.pk: form.cleaned_data for form in forms}
            versions = {pk: row["version"] for pk, row in values.items()}
            try:
                changes = split_quota(policy, values, actor=request.user, versions=versions)
            except QuotaChanged as changed:
                # Someone saved since this page was shown: show the current values, save nothing.
                policy = policy_of(group)
                children = sorted(child_policies(policy), key=lambda child: child.group.name)
                context = {
                    "group": group,
                    "policy": policy,
                    "parent_windows": _further_windows(policy),
                    "forms": quota_forms(children),
                    "conflict": changed.message,
                    "back": back,
                    "unit": unit,
                }
                return render(request, "portal/split.html", context, status=409)
            except SplitRefused as refused:
                for form in forms:
                    for field, errors in refused.errors.get(form.policy.pk, {}).items():
                        form.add_error(field if field in form.fields else None, errors)
            else:
                changed = ", ".join(change.policy.group.name for change in changes)
                messages.success(request, f"Quota split saved: {changed}." if changes else "Nothing changed.")
                return redirect(back)
        status = 400
    context = {
        "group": group,
        "policy": policy,
        "parent_windows": _further_windows(policy),
        "forms": forms,
        "back": back,
        "unit": unit,
    }
    return render(request, "portal/split.html", context, status=status)


def _further_windows(policy) -> list[dict]:
    return [{"period": p, "hours": h} for p, h in extra_budgets_of(policy).items()]
