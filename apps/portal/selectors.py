"""Reads of the estate for the portal's IT, leadership, department and tenant pages: the pools and
what runs on them (GPUs in use and lent), the queues, the budgets near their limit and the quota
of each policy below another, the engine and its event log. Who may open a view is ``access``'s,
usage and cost ``usage``'s (from the ledger), a person's own work ``my_work``'s."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, DecimalField, ExpressionWrapper, F, FilteredRelation, Min, Q, Sum
from django.utils import timezone

from apps.accounts.models import Group
from apps.accounts.selectors import subtree_ids, subtrees
from apps.cloud import selectors as cloud_selectors
from apps.cloud.caps import CapStatus, cap_statuses
from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS
from apps.engine.models import EngineSwitch, PassRecord
from apps.ledger.budgets import BudgetStatus, budget_status
from apps.policies.models import ComputeResource, PolicyChange, ResourcePolicy
from apps.policies.selectors import child_policies, parent_policy_ids
from apps.pools.models import Pool, Worker
from apps.pools.selectors import effective_capacity, live_gpus
from apps.tasks import selectors as task_selectors
from apps.tasks.fair_share import FairShare, fair_shares_now
from apps.tasks.models import Task, TaskEvent, counted_gpus

ZERO = Decimal(0)

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
    return _held(statuses, statuses, parent_policy_ids())


def holds_over(policy_ids: set[int]) -> dict[int, datetime]:
    """``budget_holds`` of these policies, reading only the budgets on them and above them (and so
    the usage of those budgets' subtrees), not every policy's."""
    parents = parent_policy_ids()
    chain: set[int] = set()
    for pk in policy_ids:
        node = pk
        while node is not None and node not in chain:
            chain.add(node)
            node = parents.get(node)
    budgeted = ResourcePolicy.objects.filter(
        Q(budget_hours__isnull=False) | Q(extra_budgets__isnull=False), pk__in=chain
    ).distinct()
    return _held(policy_ids, budget_status(budgeted), parents)


def _held(policy_ids, statuses: dict[int, BudgetStatus], parents: dict) -> dict[int, datetime]:
    holds = {}
    for pk in policy_ids:
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
    # Joined to their waiting and placed tasks only (the state index), not to every task ever run.
    live = FilteredRelation("tasks", condition=Q(tasks__state__in=(Task.State.QUEUED, *Task.ACTIVE_STATES)))
    waiting = Q(live__state=Task.State.QUEUED)
    running = Q(live__state__in=Task.ACTIVE_STATES)
    resources = (
        ComputeResource.objects.select_related("policy__group", "profile")
        .annotate(live=live)
        .annotate(
            waiting=Count("live", filter=waiting),
            waiting_gpus=Sum(counted("live__"), filter=waiting, default=ZERO),
            running=Count("live", filter=running),
            running_gpus=Sum(counted("live__"), filter=running, default=ZERO),
            oldest_wait=Min("live__submitted_at", filter=waiting),
        )
    )
    if group_ids is not None:
        resources = resources.filter(policy__group_id__in=group_ids)
    return resources


@dataclass(frozen=True)
class PolicyUse:
    """A policy with its budget status, what waits in its subtree and, below a parent lending
    fairly, its fair share of the borrowed GPUs."""

    policy: ResourcePolicy
    status: BudgetStatus
    waiting: int = 0
    fair: FairShare | None = None

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
    """The policies directly below ``policy`` (a department's teams) with their use, waiting work
    and, when ``policy`` lends fairly, fair shares."""
    children = child_policies(policy)
    statuses = budget_status(children)
    waiting = waiting_by_group()
    fair = fair_shares_now({policy.pk}) if policy.lending == ResourcePolicy.Lending.FAIR else {}
    below = subtrees(child.group_id for child in children)
    return [
        PolicyUse(
            child,
            statuses[child.pk],
            sum(waiting.get(g, 0) for g in below[child.group_id]),
            fair.get(child.pk),
        )
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
