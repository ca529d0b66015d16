"""Reads for the portal: who may open which view, the navigation by role, and the figures of each
role's view. Figures come from the owners' selectors: budgets from ``apps.ledger.budgets``, usage
and cost from ``apps.ledger.selectors``, queues from ``apps.tasks.selectors``."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, DecimalField, ExpressionWrapper, F, Min, Q, Sum
from django.urls import reverse
from django.utils import timezone

from apps.accounts.models import Group, Membership, Notification, Project, User
from apps.accounts.selectors import (
    groups_with_role,
    has_role,
    managed_group_ids,
    member_group_ids,
    roles,
    subtree_ids,
)
from apps.cloud import selectors as cloud_selectors
from apps.cloud.caps import CapStatus, cap_statuses
from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS
from apps.engine.models import EngineSwitch, PassRecord
from apps.ledger.budgets import BudgetStatus, ResourceBudget, budget_status, resource_budget
from apps.ledger.selectors import Report, ReportSpec, period_range, usage_report
from apps.policies.models import ComputeResource, PolicyChange, ResourcePolicy
from apps.policies.selectors import child_policies, parent_policy_ids, submittable_resources
from apps.pools.models import Pool, Worker
from apps.pools.selectors import capacity_history, effective_capacity, live_gpus
from apps.pricing.selectors import currencies, midnight
from apps.tasks import selectors as task_selectors
from apps.tasks.models import Task, TaskEvent, counted_gpus

Role = Membership.Role
ZERO = Decimal(0)

# Who may open which view. A forbidden view answers 403.


def may_see_leadership(user: User) -> bool:
    return has_role(user, Role.LEADERSHIP, Role.IT_ADMIN)


def may_see_it(user: User) -> bool:
    return has_role(user, Role.IT_ADMIN)


def may_set_cloud_caps(user: User) -> bool:
    """Leadership decides how much cloud spend is acceptable; IT sets caps in the admin."""
    return has_role(user, Role.LEADERSHIP)


def may_see_finance(user: User) -> bool:
    return has_role(user, Role.FINANCE, Role.LEADERSHIP, Role.IT_ADMIN)


def may_see_group(user: User, group: Group) -> bool:
    """Estate roles see every group; heads and leads their subtrees; members none."""
    managed = managed_group_ids(user)
    return managed is None or group.pk in managed


def _decides_for(user: User, group: Group, *wanted: str) -> bool:
    if has_role(user, Role.IT_ADMIN):
        return True
    return group.pk in subtree_ids(groups_with_role(user, *wanted))


def may_split_quota(user: User, group: Group) -> bool:
    """IT, the heads of the department (or of a department above it) and the tenant admins above
    it share out its quota; leadership shares out the organisation's among business units."""
    if group.kind == Group.Kind.ORGANISATION and group.pk in groups_with_role(user, Role.LEADERSHIP):
        return True
    return _decides_for(user, group, Role.DEPARTMENT_HEAD, Role.TENANT_ADMIN)


def may_manage_team(user: User, group: Group) -> bool:
    """IT, the team's lead and the heads and tenant admins above it decide its members and its
    projects' priority."""
    return _decides_for(user, group, Role.DEPARTMENT_HEAD, Role.TEAM_LEAD, Role.TENANT_ADMIN)


def organisation_to_split(user: User) -> Group | None:
    """The organisation whose quota leadership shares out: the one the person holds leadership on,
    else (for IT) the first top-level organisation."""
    organisations = Group.objects.filter(kind=Group.Kind.ORGANISATION).order_by("name")
    led = groups_with_role(user, Role.LEADERSHIP)
    return organisations.filter(pk__in=led).first() or organisations.filter(parent__isnull=True).first()


def may_see_tenant(user: User, group: Group) -> bool:
    """IT and the group's tenant admins see the tenant's page."""
    return has_role(user, Role.IT_ADMIN) or group.pk in groups_with_role(user, Role.TENANT_ADMIN)


# Navigation by role.


@dataclass(frozen=True)
class NavLink:
    label: str
    url: str
    sees: str


def navigation(user: User) -> list[NavLink]:
    """The person's views, in the order of the reference's "who decides what" table."""
    held = roles(user)
    memberships = list(user.memberships.select_related("group"))
    links = []
    if held & {Role.LEADERSHIP, Role.IT_ADMIN}:
        links.append(
            NavLink("Leadership", reverse("portal:leadership"), "Use of the estate, spend by business unit")
        )
    if Role.IT_ADMIN in held:
        links.append(
            NavLink("IT", reverse("portal:it"), "Pools, queues, budgets near their limit, the engine")
        )
    for m in memberships:
        if m.role == Role.TENANT_ADMIN:
            url = reverse("portal:tenant", args=[m.group.slug])
            links.append(NavLink(m.group.name, url, "Your tenant: its groups, policies and use"))
    for m in memberships:
        if m.role == Role.DEPARTMENT_HEAD:
            url = reverse("portal:department", args=[m.group.slug])
            links.append(NavLink(m.group.name, url, "Use per team, work waiting, the quota split"))
    if held & {Role.FINANCE, Role.LEADERSHIP, Role.IT_ADMIN}:
        links.append(
            NavLink("Finance", reverse("portal:finance"), "Prices, GPU-hours and cost for chargeback")
        )
    for m in memberships:
        if m.role == Role.TEAM_LEAD:
            url = reverse("portal:team", args=[m.group.slug])
            links.append(NavLink(m.group.name, url, "Use against the quota, run-out, members, priorities"))
    links.append(NavLink("My work", reverse("portal:work"), "Your tasks: waiting, running, requeued, done"))
    return links


# Notifications.


def notifications(user: User):
    return Notification.objects.filter(user=user)


def unread_count(user: User) -> int:
    return notifications(user).filter(read_at__isnull=True).count()


# Pools and what runs on them.


def active_tasks():
    return Task.objects.filter(state__in=Task.ACTIVE_STATES)


def counted(prefix: str = "") -> ExpressionWrapper:
    """A task's counted GPUs (``counted_gpus``: GPUs per node x nodes) as a decimal query
    expression, for sums of GPUs; ``prefix`` reaches the task through a relation (``"tasks__"``)."""
    return ExpressionWrapper(
        F(f"{prefix}gpus") * F(f"{prefix}nodes"),
        output_field=DecimalField(max_digits=GPU_MAX_DIGITS + 2, decimal_places=GPU_DECIMAL_PLACES),
    )


def borrowed_gpus(policy_ids: set[int] | None = None) -> dict[int, Decimal]:
    """Per active task, its GPUs (GPUs x nodes) on borrowed capacity. A policy borrows the GPUs it
    uses above its reservation; they are counted on its most recently placed tasks, the ones a
    reclaim takes first."""
    policies = ResourcePolicy.objects.all()
    tasks = active_tasks()
    if policy_ids is not None:
        policies = policies.filter(pk__in=policy_ids)
        tasks = tasks.filter(compute_resource__policy_id__in=policy_ids)
    reservations = dict(policies.values_list("pk", "reservation"))
    used: dict[int, Decimal] = defaultdict(Decimal)
    borrowed = {}
    rows = tasks.order_by("placed_at", "pk").values_list("pk", "gpus", "nodes", "compute_resource__policy_id")
    for pk, per_node, nodes, policy_id in rows:
        gpus = counted_gpus(per_node, nodes)
        used[policy_id] += gpus
        borrowed[pk] = max(ZERO, min(gpus, used[policy_id] - reservations[policy_id]))
    return borrowed


@dataclass(frozen=True)
class PoolUse:
    pool: Pool
    in_use: Decimal
    borrowed: Decimal
    workers: int
    observed: Decimal | None = None  # the GPUs its active worker daemons have (None: no daemon counted)

    @property
    def capacity(self) -> Decimal:
        """What the engine places against (``apps.pools.selectors.effective_capacity``)."""
        return effective_capacity(self.pool.capacity, self.observed)

    @property
    def differs(self) -> bool:
        """Its live daemons have other GPUs than IT declared: IT should look."""
        return self.observed is not None and self.observed != self.pool.capacity

    @property
    def free(self) -> Decimal:
        return max(ZERO, self.capacity - self.in_use)

    @property
    def utilisation(self) -> Decimal:
        return self.in_use / self.capacity * 100 if self.capacity else ZERO


def pool_usage(kind: str | None = None) -> list[PoolUse]:
    """Declared capacity, the GPUs of the live worker daemons, GPUs in use (GPUs x nodes) and GPUs
    lent (in use on borrowed capacity) per pool, now."""
    borrowed = borrowed_gpus()
    in_use: dict[int, Decimal] = defaultdict(Decimal)
    lent: dict[int, Decimal] = defaultdict(Decimal)
    for pk, pool_id, gpus, nodes in active_tasks().values_list("pk", "pool_id", "gpus", "nodes"):
        in_use[pool_id] += counted_gpus(gpus, nodes)
        lent[pool_id] += borrowed.get(pk, ZERO)
    active = Worker.objects.filter(state=Worker.State.ACTIVE).values("pool_id").annotate(n=Count("pk"))
    workers = {row["pool_id"]: row["n"] for row in active}
    autoscaled = set(Pool.objects.filter(cloud__isnull=False).values_list("pk", flat=True))
    live = {pk: gpus for pk, gpus in live_gpus().items() if pk not in autoscaled}
    pools = Pool.objects.select_related("gpu_type")
    if kind:
        pools = pools.filter(kind=kind)
    return [PoolUse(p, in_use[p.pk], lent[p.pk], workers.get(p.pk, 0), live.get(p.pk)) for p in pools]


# Queues and budgets.


def budget_holds(statuses: dict[int, BudgetStatus]) -> dict[int, datetime]:
    """Policies held by a used-up budget, their own or an ancestor's: policy id -> its reset."""
    parents = parent_policy_ids()
    holds = {}
    for pk in statuses:
        node = pk
        while node is not None:
            status = statuses.get(node)
            if status is not None and status.used_up:
                holds[pk] = status.resets_at
                break
            node = parents.get(node)
    return holds


def queues(group_ids: set[int] | None = None):
    """Compute resources with their work waiting and running (tasks, and GPUs x nodes) and the
    oldest wait."""
    waiting = Q(tasks__state=Task.State.QUEUED)
    running = Q(tasks__state__in=Task.ACTIVE_STATES)
    resources = ComputeResource.objects.select_related("policy__group", "profile").annotate(
        waiting=Count("tasks", filter=waiting),
        waiting_gpus=Sum(counted("tasks__"), filter=waiting, default=ZERO),
        running=Count("tasks", filter=running),
        running_gpus=Sum(counted("tasks__"), filter=running, default=ZERO),
        oldest_wait=Min("tasks__submitted_at", filter=waiting),
    )
    if group_ids is not None:
        resources = resources.filter(policy__group_id__in=group_ids)
    return resources


@dataclass(frozen=True)
class PolicyUse:
    """A policy with its budget status and what waits in its subtree."""

    policy: ResourcePolicy
    status: BudgetStatus
    waiting: int = 0

    @property
    def borrowed(self) -> Decimal:
        return max(ZERO, self.status.gpus_in_use - self.policy.reservation)


def budgets_near_limit(statuses: dict[int, BudgetStatus]) -> list[PolicyUse]:
    """Budgeted policies past their alert threshold, the most used first."""
    budgeted = ResourcePolicy.objects.filter(budget_hours__isnull=False).select_related("group")
    near = [PolicyUse(p, statuses[p.pk]) for p in budgeted if statuses[p.pk].over_threshold]
    return sorted(
        near,
        key=lambda row: max(w.used_fraction for w in row.status.windows or (row.status,)),
        reverse=True,
    )


def waiting_by_group() -> dict[int, int]:
    rows = (
        Task.objects.filter(state=Task.State.QUEUED)
        .values("compute_resource__policy__group_id")
        .annotate(n=Count("pk"))
        .order_by()
    )
    return {row["compute_resource__policy__group_id"]: row["n"] for row in rows}


def child_quotas(policy: ResourcePolicy) -> list[PolicyUse]:
    """The policies directly below ``policy`` (a department's teams) with their use and waiting work."""
    children = child_policies(policy)
    statuses = budget_status(children)
    waiting = waiting_by_group()
    return [
        PolicyUse(child, statuses[child.pk], sum(waiting.get(g, 0) for g in subtree_ids([child.group_id])))
        for child in sorted(children, key=lambda c: c.group.name)
    ]


@dataclass(frozen=True)
class TenantOverview:
    """A tenant's subtree: each policy in it (the root's first) with its use, its compute
    resources, and the profiles available to it (those a policy in the subtree is connected to)."""

    policies: list[PolicyUse]
    resources: list[ComputeResource]
    profiles: list[str]


def tenant_overview(root: Group) -> TenantOverview:
    groups = subtree_ids([root.pk])
    policies = sorted(
        ResourcePolicy.objects.filter(group_id__in=groups).select_related("group"),
        key=lambda p: (p.group_id != root.pk, p.group.name),
    )
    statuses = budget_status(policies)
    waiting = waiting_by_group()
    resources = ComputeResource.objects.filter(policy__group_id__in=groups).select_related(
        "policy__group", "profile"
    )
    resources = list(resources.order_by("policy__group__name", "name"))
    return TenantOverview(
        [PolicyUse(p, statuses[p.pk], waiting.get(p.group_id, 0)) for p in policies],
        resources,
        sorted({resource.profile.name for resource in resources}),
    )


def quota_changes(group: Group):
    """The audit trail of the quota changes in the group's subtree, newest first."""
    return PolicyChange.objects.filter(policy__group_id__in=subtree_ids([group.pk])).select_related(
        "policy__group", "actor"
    )


# The engine and the event log.


@dataclass(frozen=True)
class EngineStatus:
    switch: EngineSwitch | None
    last_pass: PassRecord | None
    recent: list[PassRecord]
    skipped_last_hour: int

    @property
    def enabled(self) -> bool:
        return self.switch is None or self.switch.enabled


def engine_status(now: datetime | None = None, recent: int = 120) -> EngineStatus:
    now = now or timezone.now()
    passes = list(PassRecord.objects.all()[:recent])
    return EngineStatus(
        switch=EngineSwitch.objects.select_related("changed_by").filter(pk=1).first(),
        last_pass=next((p for p in passes if not p.skipped), None),
        recent=passes,
        skipped_last_hour=PassRecord.objects.filter(
            skipped=True, started_at__gte=now - timedelta(hours=1)
        ).count(),
    )


def passes():
    return PassRecord.objects.all()


def cloud_nodes():
    return cloud_selectors.nodes()


def cloud_caps(now: datetime) -> list[CapStatus]:
    """Each cloud spend cap against this month's cloud spend."""
    return cap_statuses(now)


def never_fits():
    return task_selectors.never_fits()


def events():
    return TaskEvent.objects.select_related("task__compute_resource", "pool", "actor").order_by("-at", "-pk")


# Usage and cost, from the ledger's reports.


def report(viewer: User, dims: tuple[str, ...], start: datetime, end: datetime, **filters) -> Report:
    spec = ReportSpec(dims=dims, start=start, end=end, currency=currencies()[0], **filters)
    return usage_report(viewer, spec)


def this_month(now: datetime | None = None) -> tuple[datetime, datetime]:
    return period_range("month", (now or timezone.now()).date())


def last_days(count: int, now: datetime | None = None) -> list[datetime]:
    """Midnights (UTC) of the last ``count`` days, today's last."""
    today = midnight((now or timezone.now()).date())
    return [today - timedelta(days=n) for n in range(count - 1, -1, -1)]


@dataclass(frozen=True)
class EstateHistory:
    days: list[datetime]
    gpu_hours: dict[str, list[Decimal]]  # business unit -> GPU-hours per day
    cost: dict[str, list[Decimal]]  # business unit -> cost per day
    owned_utilisation: list[Decimal]  # % of the owned pools' declared capacity used, per day
    currency: str


def estate_history(viewer: User, days: int = 14, now: datetime | None = None) -> EstateHistory:
    """Use of the estate per UTC day by business unit, and the use of owned (not cloud) pools
    against the declared capacity in force that day (their capacity history)."""
    now = now or timezone.now()
    starts = last_days(days, now)
    owned = dict(Pool.objects.exclude(kind=Pool.Kind.CLOUD).values_list("pk", "name"))
    owned_names = set(owned.values())
    in_force = capacity_history(owned, starts[0], max(starts[0], now)) if starts else {}
    gpu_hours: dict[str, list[Decimal]] = defaultdict(lambda: [ZERO] * days)
    cost: dict[str, list[Decimal]] = defaultdict(lambda: [ZERO] * days)
    utilisation = []
    for i, start in enumerate(starts):
        end = start + timedelta(days=1)
        by_unit = report(viewer, ("group",), start, end, level=Group.Kind.BUSINESS_UNIT)
        for row in by_unit.rows:
            gpu_hours[row.labels["group"]][i] = row.figures.gpu_hours
            cost[row.labels["group"]][i] = row.figures.cost_amount
        by_pool = report(viewer, ("pool",), start, end)
        used = sum((r.figures.gpu_hours for r in by_pool.rows if r.labels["pool"] in owned_names), ZERO)
        capacity = sum(
            (
                c.in_force * Decimal((min(c.end, end, now) - max(c.start, start)).total_seconds()) / 3600
                for segments in in_force.values()
                for c in segments
                if c.start < min(end, now) and c.end > start
            ),
            ZERO,
        )
        utilisation.append(used / capacity * 100 if capacity > 0 else ZERO)
    return EstateHistory(starts, dict(gpu_hours), dict(cost), utilisation, currencies()[0])


# A team: its members, projects and budget.


@dataclass(frozen=True)
class MemberUse:
    membership: Membership
    gpus_in_use: Decimal
    gpu_hours: Decimal
    waiting: int
    running: int


def team_members(viewer: User, group: Group, start: datetime, end: datetime) -> list[MemberUse]:
    """The group's memberships, each with the person's work in the group's subtree and their
    GPU-hours in [start, end)."""
    in_group = Task.objects.filter(compute_resource__policy__group_id__in=subtree_ids([group.pk]))
    work = in_group.values("user_id").annotate(
        waiting=Count("pk", filter=Q(state=Task.State.QUEUED)),
        running=Count("pk", filter=Q(state__in=Task.ACTIVE_STATES)),
        gpus=Sum(counted(), filter=Q(state__in=Task.ACTIVE_STATES), default=ZERO),
    )
    by_user = {row["user_id"]: row for row in work.order_by()}
    hours = {
        r.labels["user"]: r.figures.gpu_hours for r in report(viewer, ("user",), start, end, group=group).rows
    }
    members = []
    for membership in group.memberships.select_related("user"):
        row = by_user.get(membership.user_id, {})
        members.append(
            MemberUse(
                membership,
                row.get("gpus", ZERO),
                hours.get(membership.user.username, ZERO),
                row.get("waiting", 0),
                row.get("running", 0),
            )
        )
    return members


@dataclass(frozen=True)
class ProjectUse:
    project: Project
    gpu_hours: Decimal
    waiting: int


def team_projects(viewer: User, group: Group, start: datetime, end: datetime) -> list[ProjectUse]:
    hours = {
        r.key[0]: r.figures.gpu_hours for r in report(viewer, ("project",), start, end, group=group).rows
    }
    waiting = dict(
        Task.objects.filter(project__group=group, state=Task.State.QUEUED)
        .values("project_id")
        .annotate(n=Count("pk"))
        .order_by()
        .values_list("project_id", "n")
    )
    return [
        ProjectUse(p, hours.get(p.pk, ZERO), waiting.get(p.pk, 0))
        for p in group.projects.order_by("priority", "name")
    ]


# A developer's work.

WORK_STATES = task_selectors.WORK_STATES


def my_tasks(user: User):
    return Task.objects.filter(user=user).select_related(
        "compute_resource__policy__group", "compute_resource__profile", "pool", "project"
    )


def my_resources(user: User) -> list[tuple[ComputeResource, ResourceBudget]]:
    """Where the user may submit, each with its standing against the budgets above it (held until
    a reset by a used-up budget, or exempt with a time weight of 0)."""
    holds = budget_holds(budget_status())
    resources = submittable_resources(user).filter(enabled=True).select_related("profile").order_by("name")
    return [(r, resource_budget(r.profile.time_weight, holds.get(r.policy_id))) for r in resources]


def my_projects(user: User):
    return Project.objects.filter(group_id__in=member_group_ids(user)).select_related("group")


def task_history(task: Task):
    return task.events.select_related("pool", "actor").order_by("at", "pk")


def work_counts(user: User) -> dict[str, dict[str, int]]:
    """The user's tasks per state (waiting, requeued, running, done) and compute resource."""
    counts = {}
    for state, condition in WORK_STATES.items():
        rows = (
            my_tasks(user)
            .filter(condition)
            .values("compute_resource__name")
            .annotate(n=Count("pk"))
            .order_by()
        )
        counts[state] = {row["compute_resource__name"]: row["n"] for row in rows}
    return counts
