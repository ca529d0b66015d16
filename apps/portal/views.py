"""Portal pages, one view per row of the reference's "who decides what" table, and a developer's
work. Views stay thin: they check the role through the selectors (403 otherwise), ask the
selectors for the figures, and leave every change to the services."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST
from django_tables2 import RequestConfig
from django_tables2.export import TableExport
from tablib import Dataset

from apps.accounts import services as accounts
from apps.accounts.models import Group
from apps.core.exports import spreadsheet_safe
from apps.ledger.budgets import budget_status
from apps.ledger.selectors import visible_groups
from apps.ledger.tables import UsageTable
from apps.policies.models import ResourcePolicy
from apps.policies.selectors import child_policies, submittable_resources
from apps.policies.services import QuotaChanged
from apps.pools.models import Pool
from apps.pools.selectors import estate_overview
from apps.portal import charts, selectors, services
from apps.portal.filters import (
    BudgetFilter,
    EventFilter,
    MemberFilter,
    NotificationFilter,
    PassFilter,
    PolicyFilter,
    PoolFilter,
    PoolKindFilter,
    ProjectFilter,
    QueueFilter,
    QuotaChangeFilter,
    ResourceFilter,
    TaskFilter,
    UsageFilter,
)
from apps.portal.forms import AddMemberForm, PriorityForm, SubmitForm, quota_forms
from apps.portal.tables import (
    EventTable,
    MemberTable,
    NotificationTable,
    PassTable,
    PolicyUseTable,
    PoolTable,
    ProjectTable,
    QueueTable,
    QuotaChangeTable,
    ResourceTable,
    TaskTable,
)
from apps.pricing.filters import PriceFilter
from apps.pricing.selectors import prices
from apps.pricing.tables import PriceTable
from apps.tasks import services as tasks
from apps.tasks.models import Channel, Task
from apps.tasks.selectors import may_cancel, queue_positions, visible_tasks


def _allow(allowed: bool, reason: str) -> None:
    if not allowed:
        raise PermissionDenied(reason)


class SafeExport(TableExport):
    """A table export whose cells cannot run as spreadsheet formulas."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        rows = [tuple(spreadsheet_safe(value) for value in row) for row in self.dataset]
        self.dataset = Dataset(*rows, headers=self.dataset.headers)


def _tables(request, *tables, per_page: int = 25):
    """Sort and paginate the page's tables. ``?export=csv&table=NAME`` answers with that table,
    all of its rows, as CSV; None when no export is asked for."""
    for table in tables:
        RequestConfig(request, paginate={"per_page": per_page}).configure(table)
    wanted = request.GET.get("export")
    if not wanted:
        return None
    names = {table.prefix.rstrip("-"): table for table in tables}
    name = request.GET.get("table", "")
    if wanted != "csv" or name not in names:
        return HttpResponseBadRequest(f"export: use export=csv&table= one of {', '.join(sorted(names))}.")
    return SafeExport("csv", names[name]).response(f"{name}.csv")


def _page(request, template: str, context: dict, tables=(), filters=(), status: int = 200):
    """The page, or one of its tables as CSV. A filter that refuses its value (the reason is on
    its field) makes the page a 400, and refuses the export rather than export unfiltered rows."""
    if not all(found.is_valid() for found in filters):
        if request.GET.get("export"):
            return HttpResponseBadRequest("export: a filter refuses its value (the page names the field).")
        status = 400
    exported = _tables(request, *tables)
    if exported is not None:
        return exported
    return render(request, template, context, status=status)


def _kept(rows: list, found, pk) -> list:
    """The rows of a table built from a list whose object (``pk(row)``) the filter keeps."""
    kept = set(found.qs.values_list("pk", flat=True))
    return [row for row in rows if pk(row) in kept]


def _group(slug: str) -> Group:
    return get_object_or_404(Group, slug=slug)


def _policy(group: Group) -> ResourcePolicy:
    policy = ResourcePolicy.objects.select_related("group").filter(group=group).first()
    if policy is None:
        raise Http404(f"{group} has no resource policy.")
    return policy


@login_required
def home(request):
    context = estate_overview() | {
        "views": selectors.navigation(request.user),
        "latest": selectors.notifications(request.user).filter(read_at__isnull=True)[:5],
    }
    return render(request, "portal/home.html", context)


@login_required
def leadership(request):
    _allow(selectors.may_see_leadership(request.user), "Only leadership and IT see the leadership view.")
    now = timezone.now()
    history = selectors.estate_history(request.user, now=now)
    start, end = selectors.this_month(now)
    level = Group.Kind.BUSINESS_UNIT
    units = selectors.report(request.user, ("group",), start, end, level=level)
    cloud = selectors.pool_usage(kind=Pool.Kind.CLOUD)
    units_filter = UsageFilter(
        request.GET,
        groups=visible_groups(request.user).filter(kind=level).order_by("name"),
        levels=False,
        group_label="Business unit",
        prefix="u",
    )
    cloud_filter = PoolFilter(request.GET, queryset=Pool.objects.filter(kind=Pool.Kind.CLOUD), prefix="c")
    wanted = units_filter.spec()
    shown = selectors.report(request.user, ("group",), start, end, level=level, **wanted) if wanted else units
    days = [f"{day:%Y-%m-%d}" for day in history.days]
    unit_names = [row.labels["group"] for row in units.rows]
    context = {
        "units": UsageTable(shown, prefix="units-"),
        "cloud": PoolTable(_kept(cloud, cloud_filter, lambda use: use.pool.pk), prefix="cloud-"),
        "units_filter": units_filter,
        "cloud_filter": cloud_filter,
        "month": start,
        "charts": [
            charts.bars(
                "use-by-unit",
                "GPU-hours per day by business unit",
                days,
                history.gpu_hours,
                y_title="GPU-hours",
                stacked=True,
            ),
            charts.bars(
                "spend-by-unit",
                f"GPU-hours and spend by business unit this month ({units.spec.currency})",
                unit_names,
                {
                    "GPU-hours": [row.figures.gpu_hours for row in units.rows],
                    f"cost ({units.spec.currency})": [row.figures.cost_amount for row in units.rows],
                },
            ),
            charts.bars(
                "cloud-in-use",
                "Cloud capacity in use now (GPUs)",
                [use.pool.name for use in cloud],
                {"declared": [use.pool.capacity for use in cloud], "in use": [use.in_use for use in cloud]},
                y_title="GPUs",
            ),
            charts.lines(
                "owned-utilisation",
                "Owned-GPU utilisation per day (% of declared capacity)",
                days,
                {"owned pools": history.owned_utilisation},
                y_title="%",
            ),
        ],
    }
    return _page(
        request,
        "portal/leadership.html",
        context,
        [context["units"], context["cloud"]],
        [units_filter, cloud_filter],
    )


@login_required
def it(request):
    _allow(selectors.may_see_it(request.user), "Only IT admins see the IT view.")
    pools = selectors.pool_usage()
    queues = QueueFilter(request.GET, queryset=selectors.queues(), prefix="q")
    statuses = budget_status()
    engine = selectors.engine_status()
    events = EventFilter(request.GET, queryset=selectors.events(), prefix="e")
    pool_filter = PoolKindFilter(request.GET, queryset=Pool.objects.all(), prefix="p")
    budget_filter = BudgetFilter(
        request.GET, queryset=ResourcePolicy.objects.filter(budget_hours__isnull=False), prefix="b"
    )
    pass_filter = PassFilter(request.GET, queryset=selectors.passes(), prefix="s")
    near = selectors.budgets_near_limit(statuses)
    waiting = [r for r in selectors.queues().order_by("-waiting_gpus", "name") if r.waiting][:15]
    recent = list(reversed(engine.recent))
    context = {
        "engine": engine,
        "queue_filter": queues,
        "event_filter": events,
        "pool_filter": pool_filter,
        "budget_filter": budget_filter,
        "pass_filter": pass_filter,
        "pools": PoolTable(_kept(pools, pool_filter, lambda use: use.pool.pk)),
        "queues": QueueTable(queues.qs),
        "budgets": PolicyUseTable(
            _kept(near, budget_filter, lambda row: row.policy.pk), prefix="budgets-", exclude=("waiting",)
        ),
        "passes": PassTable(pass_filter.qs),
        "events": EventTable(events.qs),
        "charts": [
            charts.bars(
                "pool-capacity",
                "Capacity and use per pool (GPUs)",
                [use.pool.name for use in pools],
                {
                    "declared": [use.pool.capacity for use in pools],
                    "in use": [use.in_use for use in pools],
                    "borrowed": [use.borrowed for use in pools],
                },
                y_title="GPUs",
            ),
            charts.bars(
                "queue-waiting",
                "GPUs waiting per compute resource (longest queues)",
                [r.name for r in waiting],
                {"waiting": [r.waiting_gpus for r in waiting]},
                y_title="GPUs",
            ),
            charts.lines(
                "pass-duration",
                "Engine passes: duration (ms)",
                [p.started_at for p in recent],
                {"duration": [p.duration_ms for p in recent]},
                y_title="ms",
            ),
        ],
    }
    tables = [context[name] for name in ("pools", "queues", "budgets", "passes", "events")]
    filters = [queues, events, pool_filter, budget_filter, pass_filter]
    return _page(request, "portal/it.html", context, tables, filters)


@login_required
def finance(request):
    _allow(selectors.may_see_finance(request.user), "Only finance, leadership and IT see the finance view.")
    start, end = selectors.this_month()
    groups = selectors.report(request.user, ("group",), start, end)
    groups_filter = UsageFilter(request.GET, groups=visible_groups(request.user).order_by("name"), prefix="g")
    prices_filter = PriceFilter(request.GET, queryset=prices(), prefix="pr")
    wanted = groups_filter.spec()
    shown = selectors.report(request.user, ("group",), start, end, **wanted) if wanted else groups
    by_type = selectors.report(request.user, ("gpu_type",), start, end)
    units = [row for row in groups.rows if row.labels["group_kind"] == Group.Kind.BUSINESS_UNIT.label]
    currency = groups.spec.currency
    context = {
        "groups": UsageTable(shown, prefix="groups-"),
        "prices": PriceTable(prices_filter.qs, prefix="prices-", exclude=("actions",)),
        "groups_filter": groups_filter,
        "prices_filter": prices_filter,
        "month": start,
        "currency": currency,
        "charts": [
            charts.bars(
                "cost-by-unit",
                f"Cost by business unit this month ({currency})",
                [row.labels["group"] for row in units],
                {"cost": [row.figures.cost_amount for row in units]},
                y_title=currency,
            ),
            charts.bars(
                "cost-by-gpu-type",
                f"GPU-hours and cost by GPU type this month ({currency})",
                [row.labels["gpu_type"] for row in by_type.rows],
                {
                    "GPU-hours": [row.figures.gpu_hours for row in by_type.rows],
                    f"cost ({currency})": [row.figures.cost_amount for row in by_type.rows],
                },
            ),
        ],
    }
    return _page(
        request,
        "portal/finance.html",
        context,
        [context["groups"], context["prices"]],
        [groups_filter, prices_filter],
    )


@login_required
def department(request, slug: str):
    group = _group(slug)
    _allow(selectors.may_see_group(request.user, group), f"You may not see {group}.")
    policy = _policy(group)
    teams = selectors.child_quotas(policy)
    status = budget_status([policy])[policy.pk]
    names = [team.policy.group.name for team in teams]
    teams_filter = PolicyFilter(
        request.GET, queryset=ResourcePolicy.objects.filter(pk__in=[t.policy.pk for t in teams]), prefix="t"
    )
    changes_filter = QuotaChangeFilter(request.GET, queryset=selectors.quota_changes(group), prefix="c")
    context = {
        "group": group,
        "policy": policy,
        "status": status,
        "reserved": sum(team.policy.reservation for team in teams),
        "budgeted": sum(team.policy.budget_hours or 0 for team in teams),
        "waiting": sum(team.waiting for team in teams),
        "may_split": selectors.may_split_quota(request.user, group) and bool(teams),
        "teams": PolicyUseTable(_kept(teams, teams_filter, lambda t: t.policy.pk), prefix="teams-"),
        "changes": QuotaChangeTable(changes_filter.qs),
        "teams_filter": teams_filter,
        "changes_filter": changes_filter,
        "charts": [
            charts.bars(
                "team-gpus",
                "GPUs per team: in use against reservation and limit",
                names,
                {
                    "in use": [team.status.gpus_in_use for team in teams],
                    "reservation": [team.policy.reservation for team in teams],
                    "limit": [team.policy.limit for team in teams],
                },
                y_title="GPUs",
            ),
            charts.bars(
                "team-hours",
                "Hours per team in the current period",
                names,
                {
                    "GPU-hours": [team.status.gpu_hours for team in teams],
                    "budget hours used": [team.status.used_hours for team in teams],
                    "budget hours left": [team.status.left_hours or 0 for team in teams],
                },
                y_title="hours",
            ),
        ],
    }
    return _page(
        request,
        "portal/department.html",
        context,
        [context["teams"], context["changes"]],
        [teams_filter, changes_filter],
    )


@login_required
def split(request, slug: str):
    group = _group(slug)
    _allow(
        selectors.may_split_quota(request.user, group),
        f"Only IT and the heads of {group} share out its quota.",
    )
    policy = _policy(group)
    children = sorted(child_policies(policy), key=lambda child: child.group.name)
    forms = quota_forms(children, request.POST or None)
    status = 200
    if request.method == "POST":
        if all(form.is_valid() for form in forms):
            values = {form.policy.pk: form.cleaned_data for form in forms}
            versions = {pk: row["version"] for pk, row in values.items()}
            try:
                changes = services.split_quota(policy, values, actor=request.user, versions=versions)
            except QuotaChanged as changed:
                # Someone saved since this page was shown: show the current values, save nothing.
                policy = _policy(group)
                children = sorted(child_policies(policy), key=lambda child: child.group.name)
                context = {
                    "group": group,
                    "policy": policy,
                    "forms": quota_forms(children),
                    "conflict": changed.message,
                }
                return render(request, "portal/split.html", context, status=409)
            except services.SplitRefused as refused:
                for form in forms:
                    for field, errors in refused.errors.get(form.policy.pk, {}).items():
                        form.add_error(field if field in form.fields else None, errors)
            else:
                changed = ", ".join(change.policy.group.name for change in changes)
                messages.success(request, f"Quota split saved: {changed}." if changes else "Nothing changed.")
                return redirect("portal:department", slug=group.slug)
        status = 400
    context = {"group": group, "policy": policy, "forms": forms}
    return render(request, "portal/split.html", context, status=status)


def _team_page(request, group: Group, *, add_form=None, status: int = 200):
    _allow(selectors.may_see_group(request.user, group), f"You may not see {group}.")
    policy = _policy(group)
    now = timezone.now()
    status_now = budget_status([policy], now=now)[policy.pk]
    start, end = status_now.period_start, status_now.resets_at
    members = selectors.team_members(request.user, group, start, end)
    projects = selectors.team_projects(request.user, group, start, end)
    manager = selectors.may_manage_team(request.user, group)
    member_filter = MemberFilter(request.GET, queryset=group.memberships.all(), prefix="m")
    project_filter = ProjectFilter(request.GET, queryset=group.projects.all(), prefix="j")
    member_table = MemberTable(
        _kept(members, member_filter, lambda m: m.membership.pk), exclude=() if manager else ("actions",)
    )
    project_table = ProjectTable(
        _kept(projects, project_filter, lambda p: p.project.pk), exclude=() if manager else ("actions",)
    )
    team_charts = [
        charts.bars(
            "group-gpus",
            "GPUs now: in use against reservation and limit",
            [group.name],
            {
                "in use": [status_now.gpus_in_use],
                "reservation": [policy.reservation],
                "limit": [policy.limit],
            },
            y_title="GPUs",
        ),
        charts.bars(
            "member-hours",
            "GPU-hours per member in the period",
            [m.membership.user.username for m in members],
            {"GPU-hours": [m.gpu_hours for m in members]},
            y_title="GPU-hours",
        ),
    ]
    if status_now.has_budget:
        team_charts.insert(
            1,
            charts.budget_projection(
                "budget-run-out", "Time budget: used and projected run-out", status_now, now
            ),
        )
    context = {
        "group": group,
        "policy": policy,
        "status": status_now,
        "borrowed": max(status_now.gpus_in_use - policy.reservation, 0),
        "manager": manager,
        "add_form": add_form or AddMemberForm(),
        "members": member_table,
        "projects": project_table,
        "member_filter": member_filter,
        "project_filter": project_filter,
        "charts": team_charts,
    }
    tables, filters = [member_table, project_table], [member_filter, project_filter]
    return _page(request, "portal/team.html", context, tables, filters, status=status)


@login_required
def team(request, slug: str):
    return _team_page(request, _group(slug))


def _manage(request, group: Group) -> None:
    _allow(
        selectors.may_manage_team(request.user, group),
        f"Only IT, the lead and the heads of {group} change it.",
    )


@login_required
@require_POST
def add_member(request, slug: str):
    group = _group(slug)
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
    group = _group(slug)
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
    group = _group(slug)
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


@login_required
def work(request):
    user = request.user
    mine = selectors.my_tasks(user)
    found = TaskFilter(request.GET, queryset=mine, prefix="f")
    resource_filter = ResourceFilter(
        request.GET, queryset=submittable_resources(user).filter(enabled=True), prefix="r"
    )
    waiting = list(mine.filter(state=Task.State.QUEUED))
    policies = set(
        mine.filter(state__in=Task.ACTIVE_STATES).values_list("compute_resource__policy_id", flat=True)
    )
    form = SubmitForm(
        request.POST or None,
        resources=submittable_resources(user).filter(enabled=True),
        projects=selectors.my_projects(user),
    )
    if request.method == "POST" and form.is_valid():
        data = form.cleaned_data
        try:
            task = tasks.submit(user=user, channel=Channel.PORTAL, **data)
        except ValidationError as error:
            for field, errors in error.message_dict.items():
                form.add_error(field if field in form.fields else None, errors)
        else:
            place = queue_positions([task]).get(task.pk)
            messages.success(
                request, f"Task {task.pk} submitted to {task.compute_resource}: number {place} in line."
            )
            return redirect("portal:work")
    counts = selectors.work_counts(user)
    resource_names = sorted({name for by_resource in counts.values() for name in by_resource})
    context = {
        "task_filter": found,
        "form": form,
        "tasks": TaskTable(
            found.qs,
            positions=queue_positions(waiting),
            borrowed=selectors.borrowed_gpus(policies),
            prefix="tasks-",
        ),
        "resources": ResourceTable(_kept(selectors.my_resources(user), resource_filter, lambda r: r[0].pk)),
        "resource_filter": resource_filter,
        "charts": [
            charts.bars(
                "my-work",
                "My tasks by state and compute resource",
                resource_names,
                {
                    state: [by_resource.get(name, 0) for name in resource_names]
                    for state, by_resource in counts.items()
                },
                y_title="tasks",
                stacked=True,
            )
        ],
    }
    tables = [context["tasks"], context["resources"]]
    return _page(
        request,
        "portal/work.html",
        context,
        tables,
        [found, resource_filter],
        status=400 if form.errors else 200,
    )


def _visible_task(request, pk: int) -> Task:
    task = get_object_or_404(Task.objects.select_related("compute_resource__policy__group", "pool"), pk=pk)
    _allow(visible_tasks(request.user).filter(pk=pk).exists(), f"Task {pk} is not yours to see.")
    return task


@login_required
def task_detail(request, pk: int):
    task = _visible_task(request, pk)
    history = EventTable(selectors.task_history(task), exclude=("task", "compute_resource"))
    context = {
        "task": task,
        "place": queue_positions([task]).get(task.pk),
        "borrowed": selectors.borrowed_gpus({task.compute_resource.policy_id}).get(task.pk),
        "may_cancel": may_cancel(request.user, task) and task.state not in Task.FINAL_STATES,
        "history": history,
    }
    return _page(request, "portal/task.html", context, [history])


@login_required
@require_POST
def cancel(request, pk: int):
    task = get_object_or_404(Task.objects.select_related("compute_resource__policy"), pk=pk)
    _allow(may_cancel(request.user, task), f"You may not cancel task {pk}.")
    tasks.cancel(task, actor=request.user)
    messages.success(request, f"Task {pk}: cancel requested.")
    return redirect("portal:task", pk=pk)


@login_required
def notifications(request):
    found = NotificationFilter(request.GET, queryset=selectors.notifications(request.user))
    table = NotificationTable(found.qs, prefix="notifications-")
    context = {"notification_filter": found, "table": table}
    return _page(
        request, "portal/notifications.html", context, [table], status=200 if found.is_valid() else 400
    )


@login_required
@require_POST
def notification_read(request, pk: int):
    mine = selectors.notifications(request.user).filter(pk=pk)
    if not mine.exists():
        raise Http404("No such notification of yours.")
    if request.POST.get("unread"):
        services.mark_unread(mine)
    else:
        services.mark_read(mine)
    return redirect("portal:notifications")


@login_required
@require_POST
def notifications_read_all(request):
    count = services.mark_read(selectors.notifications(request.user))
    messages.success(request, f"{count} notifications marked read.")
    return redirect("portal:notifications")
