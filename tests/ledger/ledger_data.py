"""A small estate for ledger and pricing tests, usage intervals written as the engine writes them,
and an independent reference computation of what a report must say."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, Project, User
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.policies.models import ComputeResource
from apps.pools.models import GpuType, Pool
from apps.tasks.models import Task
from tests.factories import ComputeResourceFactory, GpuTypeFactory, PoolFactory, ProfileFactory, UserFactory

Role = Membership.Role
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class Estate:
    org: Group
    bu: Group
    dept: Group
    team_a: Group
    team_b: Group
    other_dept: Group
    team_c: Group
    a100: GpuType
    h100: GpuType
    onprem: Pool
    cloud: Pool
    resources: dict[str, ComputeResource]  # group slug -> a compute resource of its policy
    project_a: Project
    users: dict[str, User]

    @property
    def groups(self) -> list[Group]:
        return [self.org, self.bu, self.dept, self.team_a, self.team_b, self.other_dept, self.team_c]


def make_estate() -> Estate:
    def group(slug, kind, parent=None):
        return accounts.create_group(name=slug.replace("-", " ").title(), slug=slug, kind=kind, parent=parent)

    org = group("acme", Group.Kind.ORGANISATION)
    bu = group("research", Group.Kind.BUSINESS_UNIT, org)
    dept = group("language", Group.Kind.DEPARTMENT, bu)
    team_a = group("pretraining", Group.Kind.TEAM, dept)
    team_b = group("alignment", Group.Kind.TEAM, dept)
    other_dept = group("vision", Group.Kind.DEPARTMENT, bu)
    team_c = group("perception", Group.Kind.TEAM, other_dept)
    a100 = GpuTypeFactory(name="A100-80GB")
    h100 = GpuTypeFactory(name="H100", memory_gb=80)
    onprem = PoolFactory(name="onprem", gpu_type=a100, capacity=Decimal("8"))
    cloud = PoolFactory(name="cloud", gpu_type=h100, capacity=Decimal("4"), kind=Pool.Kind.CLOUD)
    resources = {}
    for g in (dept, team_a, team_b, team_c):
        policy = policies.create_policy(group=g, reservation=0, limit=16)
        resources[g.slug] = ComputeResourceFactory(
            name=f"{g.slug}-flex", policy=policy, profile=ProfileFactory(gpus=1, size_from_task=True)
        )
    users = {}
    for name, role, g in [
        ("alice", Role.MEMBER, team_a),
        ("bob", Role.MEMBER, team_b),
        ("carol", Role.MEMBER, team_c),
        ("lead", Role.TEAM_LEAD, team_a),
        ("head", Role.DEPARTMENT_HEAD, dept),
        ("fin", Role.FINANCE, org),
        ("it", Role.IT_ADMIN, org),
        ("cio", Role.LEADERSHIP, org),
    ]:
        users[name] = UserFactory(username=name)
        accounts.add_membership(user=users[name], group=g, role=role)
    project_a = accounts.create_project(group=team_a, name="llm-7b")
    return Estate(
        org,
        bu,
        dept,
        team_a,
        team_b,
        other_dept,
        team_c,
        a100,
        h100,
        onprem,
        cloud,
        resources,
        project_a,
        users,
    )


def record(
    estate: Estate,
    group: Group,
    user: User,
    pool: Pool,
    start: datetime,
    end: datetime | None = None,
    gpus="1",
    weight="1",
    project: Project | None = None,
    task: Task | None = None,
) -> UsageInterval:
    """One usage interval, as ``apps.ledger.services.open_intervals`` writes it (and, for a task a
    worker holds, as its claim names the worker)."""
    resource = estate.resources[group.slug]
    task = task or Task.objects.create(
        user=user, compute_resource=resource, gpus=Decimal(gpus), command="train"
    )
    return UsageInterval.objects.create(
        task=task,
        user=user,
        project=project,
        policy=resource.policy,
        group=group,
        compute_resource=resource,
        pool=pool,
        gpu_type=pool.gpu_type,
        gpus=Decimal(gpus),
        time_weight=Decimal(weight),
        start=start,
        end=end,
        worker=task.worker,
    )


def ms(moment: datetime) -> int:
    return (moment - EPOCH) // timedelta(milliseconds=1)


def expected(intervals, start: datetime, end: datetime, now: datetime, prices=None) -> dict:
    """What a report over [start, end) at ``now`` must total for these intervals, computed the
    plain way: the overlap of each interval (times truncated to the millisecond, running ones up to
    now) in exact fractions of an hour, priced with ``prices`` {gpu_type_id: [(from, price), ...]}."""
    lo, hi = ms(start), ms(min(end, now))
    gpu_hours = budget_hours = cost = Fraction(0)
    for interval in intervals:
        s = max(ms(interval.start), lo)
        e = min(ms(interval.end if interval.end is not None else now), hi)
        if e <= s:
            continue
        gpu_hours += Fraction(e - s, 3_600_000) * Fraction(interval.gpus)
        budget_hours += Fraction(e - s, 3_600_000) * Fraction(interval.time_weight)
        changes = sorted((prices or {}).get(interval.gpu_type_id, []))
        for i, (since, price) in enumerate(changes):
            until = changes[i + 1][0] if i + 1 < len(changes) else None
            a, b = max(s, ms(since)), min(e, ms(until)) if until else e
            if b > a:
                cost += Fraction(b - a, 3_600_000) * Fraction(interval.gpus) * Fraction(price)
    return {"gpu_hours": gpu_hours, "budget_hours": budget_hours, "cost": cost}


def rounded(value: Fraction, places: int) -> Decimal:
    """Half up, as reports round."""
    scaled = value * 10**places
    whole = (scaled.numerator * 2 + scaled.denominator) // (2 * scaled.denominator)
    return Decimal(whole).scaleb(-places)
