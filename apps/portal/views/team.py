"""A team lead's page: members and project priorities."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.utils import timezone
from django.views.decorators.http import require_POST

from apps.accounts import services as accounts
from apps.accounts.models import Group
from apps.ledger.budgets import budget_status, money_status
from apps.portal import access, charts, guarantees, lost_work, services, usage
from apps.portal.filters import (
    MemberFilter,
    ProjectFilter,
)
from apps.portal.forms import AddMemberForm, PriorityForm
from apps.portal.group_tables import MemberTable, ProjectTable
from apps.portal.views.common import allow, group_or_404, kept, policy_of, render_page
from apps.tasks.guarantee_selectors import group_guarantee


def _team_page(request, group: Group, *, add_form=None, status: int = 200):
    allow(access.may_see_group(request.user, group), f"You may not see {group}.")
    policy = policy_of(group)
    now = timezone.now()
    status_now = budget_status([policy], now=now)[policy.pk]
    own = status_now.windows[0] if status_now.windows else status_now  # the policy's own period
    start, end = own.period_start, own.resets_at
    members = usage.team_members(request.user, group, start, end)
    projects = usage.team_projects(request.user, group, start, end)
    manager = access.may_manage_team(request.user, group)
    member_filter = MemberFilter(request.GET, queryset=group.memberships.all(), prefix="m")
    project_filter = ProjectFilter(request.GET, queryset=group.projects.all(), prefix="j")
    member_table = MemberTable(
        kept(members, member_filter, lambda m: m.membership.pk), exclude=() if manager else ("actions",)
    )
    project_table = ProjectTable(
        kept(projects, project_filter, lambda p: p.project.pk), exclude=() if manager else ("actions",)
    )
    team_charts = [
        charts.against(
            "group-gpus",
            "GPUs now: in use against reservation and limit",
            [group.name],
            {"in use": [status_now.gpus_in_use]},
            {"reservation": [policy.reservation], "limit": [policy.limit]},
            y_title="GPUs",
            empty="No reservation, no limit and no GPUs in use.",
        ),
        charts.bars(
            "member-hours",
            "GPU-hours per member in the period",
            [m.membership.user.username for m in members],
            {"GPU-hours": [m.gpu_hours for m in members]},
            y_title="GPU-hours",
            empty="No member has used GPUs in the period.",
        ),
    ]
    if status_now.has_budget:
        windows = status_now.windows or (status_now,)
        for i, window in enumerate(windows):
            team_charts.insert(
                1 + i,
                charts.budget_projection(
                    "budget-run-out" if i == 0 else f"budget-run-out-{window.period}",
                    f"Time budget per {window.period}: used and projected run-out"
                    if len(windows) > 1
                    else "Time budget: used and projected run-out",
                    window,
                    now,
                ),
            )
    context = {
        "group": group,
        "policy": policy,
        "status": status_now,
        "money_rows": [("", window) for window in money_status([policy], now=now).get(policy.pk, ())],
        "borrowed": max(status_now.gpus_in_use - policy.reservation, 0),
        "manager": manager,
        "add_form": add_form or AddMemberForm(),
        "members": member_table,
        "projects": project_table,
        "member_filter": member_filter,
        "project_filter": project_filter,
        "charts": team_charts,
        "guarantee_period": "this month",
        "guarantee_rows": [
            guarantees.shown(group.name, group_guarantee(policy, *guarantees.bounds("month", now)))
        ],
        "lost_rows": lost_work.lost_rows(group, *guarantees.bounds("month", now)),
    }
    tables, filters = [member_table, project_table], [member_filter, project_filter]
    return render_page(request, "portal/team.html", context, tables, filters, status=status)


@login_required
def team(request, slug: str):
    return _team_page(request, group_or_404(slug))


def _manage(request, group: Group) -> None:
    allow(
        access.may_manage_team(request.user, group),
        f"Only IT, the lead and the heads of {group} change it.",
    )


@login_required
@require_POST
def add_member(request, slug: str):
    group = group_or_404(slug)
    _manage(request, group)
    form = AddMemberForm(request.POST)
    if form.is_valid():
        try:
            services.add_member(group=group, user=form.cleaned_data["user"])
        except ValidationError as error:
            form.add_error("user", error.messages)
        else:
            messages.success(request, f"{form.cleaned_data['user']} may now use {group}'s share.")
            return redirect("portal:team", slug=group.slug)
    return _team_page(request, group, add_form=form, status=400)


@login_required
@require_POST
def remove_member(request, slug: str, pk: int):
    group = group_or_404(slug)
    _manage(request, group)
    membership = get_object_or_404(group.memberships.select_related("user"), pk=pk)
    try:
        services.remove_member(membership)
    except ValidationError as error:
        raise PermissionDenied(" ".join(error.messages)) from error
    messages.success(request, f"{membership.user} no longer uses {group}'s share.")
    return redirect("portal:team", slug=group.slug)


@login_required
@require_POST
def project_priority(request, slug: str, pk: int):
    group = group_or_404(slug)
    _manage(request, group)
    project = get_object_or_404(group.projects, pk=pk)
    form = PriorityForm(request.POST, instance=project)
    if form.is_valid():
        accounts.set_project_priority(project, form.cleaned_data["priority"])
        messages.success(request, f"Priority of {project.name} is now {project.priority}.")
        return redirect("portal:team", slug=group.slug)
    for error in form.errors.get("priority", []):
        messages.error(request, f"Priority of {project.name}: {error}")
    project.refresh_from_db()
    return _team_page(request, group, status=400)
