"""Usage and cost for the portal's pages, from the ledger's reports (``apps.ledger.selectors``): a
report in the first currency, this month, the estate's history by business unit and the use of
the owned pools, and a team's members and projects with their GPU-hours."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Count, Q, Sum
from django.utils import timezone

from apps.accounts.models import Group, Membership, Project, User
from apps.accounts.selectors import subtree_ids
from apps.ledger.report_spec import ReportSpec, period_range
from apps.ledger.selectors import Report, daily_reports, usage_report
from apps.pools.models import Pool
from apps.pools.selectors import capacity_history
from apps.portal.selectors import ZERO, counted
from apps.pricing.selectors import currencies, midnight
from apps.tasks.models import Task


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
    currency = currencies()[0]
    first = starts[0] if starts else now
    end = first + timedelta(days=days)
    by_units = daily_reports(
        viewer, ReportSpec(("group",), first, end, currency, level=Group.Kind.BUSINESS_UNIT), now
    )
    by_pools = daily_reports(viewer, ReportSpec(("pool",), first, end, currency), now)
    for i, (start, by_unit, by_pool) in enumerate(zip(starts, by_units, by_pools, strict=True)):
        end = start + timedelta(days=1)
        for row in by_unit.rows:
            gpu_hours[row.labels["group"]][i] = row.figures.gpu_hours
            cost[row.labels["group"]][i] = row.figures.cost_amount
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
    return EstateHistory(starts, dict(gpu_hours), dict(cost), utilisation, currency)


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
