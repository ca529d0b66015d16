"""The demo estate at scale (``seed_demo --size large`` or ``medium``): the demo estate, then
business units, departments and teams under it (four levels), pools and profiles, users, projects
and compute resources, written with bulk inserts; then a year of work (``demo_usage``). Rows are
the ones the services would write (a policy per group inside its parent's envelope, each pool's
first capacity row, ranks in order), without per-row services or audit rows."""

import random
import time
from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Group, Membership, Project, User
from apps.policies.models import ComputeResource, Profile, ProfilePool, ResourcePolicy
from apps.pools.models import SINCE_EVER, GpuType, Pool, PoolCapacityChange
from apps.portal import demo_usage


@dataclass(frozen=True)
class Size:
    groups: int  # all of them, the demo's 15 included
    pools: int
    tasks: int
    intervals: int


SIZES = {
    "large": Size(groups=2_000, pools=500, tasks=50_000, intervals=10_000_000),
    "medium": Size(groups=200, pools=50, tasks=5_000, intervals=1_000_000),
}
# Slugs of the groups added here start with this; their presence marks the estate as seeded.
PREFIX = "x-"
MEMBERS_PER_TEAM = 3
PROJECTS_PER_TEAM = 2
POOLS_PER_PROFILE = 10
# The limit of the groups added at each level: no reservation, limits inside their parents'.
LEVELS = {
    Group.Kind.BUSINESS_UNIT: 200,
    Group.Kind.DEPARTMENT: 100,
    Group.Kind.TEAM: 32,
}
POOL_KINDS = [Pool.Kind.KUBERNETES, Pool.Kind.BAREMETAL, Pool.Kind.HPC]
REGIONS = [("eu-west", "NL"), ("eu-central", "DE"), ("us-east", "US"), ("ap-south", "IN")]
NEW_GPU_TYPES = ["A100-80GB", "L40S", "H100"]


def level_counts(total: int) -> tuple[int, int, int]:
    """(business units, departments, teams) for ``total`` groups with the organisation: about one
    business unit in a hundred groups and one department in thirteen, never fewer than the demo's."""
    units = max(2, round(total / 100))
    departments = max(4, round(total * 0.075))
    return units, departments, total - 1 - units - departments


def seed(size: Size, *, seed_value: int = 36, out=print) -> dict[str, int]:
    """Make the demo estate (``demo.seed``, loaded first) ``size``; returns the rows added
    (nothing when it is there already: groups named ``x-...`` exist)."""
    if Group.objects.filter(slug__startswith=PREFIX).exists():
        return {}
    rng = random.Random(seed_value)
    now = timezone.now()
    began = time.perf_counter()
    with transaction.atomic():
        teams = groups(size, rng)
        out(f"groups, policies, users and projects: {time.perf_counter() - began:.1f} s")
        pools(size, rng)
        resources(teams, rng)
        out(f"pools, profiles and compute resources: {time.perf_counter() - began:.1f} s")
        added = demo_usage.seed_work(size.tasks, size.intervals, now=now, rng=rng, out=out, began=began)
    added.update(groups=Group.objects.count(), pools=Pool.objects.count(), users=User.objects.count())
    return added


def _policy(group: Group, limit: int, rng: random.Random) -> ResourcePolicy:
    policy = ResourcePolicy(group=group, reservation=Decimal(0), limit=Decimal(limit))
    # Budgets on teams of the new departments: a demo department's budget would not hold them.
    if group.kind == Group.Kind.TEAM and group.parent.slug.startswith(PREFIX) and rng.random() < 0.3:
        policy.budget_hours = Decimal(rng.choice([2_000, 5_000, 10_000]))
        policy.budget_period = "month"
    return policy


def groups(size: Size, rng: random.Random) -> list[Group]:
    """The business units, departments and teams beyond the demo's, each level spread over the one
    above it in turn (demo groups included, so every demo role sees a bigger subtree), with a
    policy each, three members (the first also the team lead) and two projects per team."""
    units, departments, teams = level_counts(size.groups)
    acme = Group.objects.get(slug="acme")
    parents = list(Group.objects.filter(kind=Group.Kind.BUSINESS_UNIT).order_by("pk"))
    added: dict[str, list[Group]] = {}
    for kind, wanted, parent_kind in (
        (Group.Kind.BUSINESS_UNIT, units, Group.Kind.ORGANISATION),
        (Group.Kind.DEPARTMENT, departments, Group.Kind.BUSINESS_UNIT),
        (Group.Kind.TEAM, teams, Group.Kind.DEPARTMENT),
    ):
        parents = [acme] if parent_kind == Group.Kind.ORGANISATION else parents
        existing = Group.objects.filter(kind=kind).count()
        new = [
            Group(
                name=f"{kind.label} {n:04}",
                slug=f"{PREFIX}{kind[:4]}-{n:04}",
                kind=kind,
                parent=parents[n % len(parents)],
            )
            for n in range(max(0, wanted - existing))
        ]
        added[kind] = Group.objects.bulk_create(new, batch_size=2_000)
        parents = list(Group.objects.filter(kind=kind).order_by("pk"))
    ResourcePolicy.objects.bulk_create(
        [_policy(g, LEVELS[kind], rng) for kind, made in added.items() for g in made], batch_size=2_000
    )
    people(added)
    return added[Group.Kind.TEAM]


def people(added: dict[str, list[Group]]) -> None:
    """Members and a lead for each new team, a head for each new department, projects per team."""
    users, roles = [], []
    for team in added[Group.Kind.TEAM]:
        for n in range(MEMBERS_PER_TEAM):
            users.append(
                User(username=f"{team.slug}-{n}", password="!", email=f"{team.slug}-{n}@acme.example")
            )
            roles.append((team, Membership.Role.MEMBER))
    for department in added[Group.Kind.DEPARTMENT]:
        users.append(User(username=f"{department.slug}-head", password="!"))
        roles.append((department, Membership.Role.DEPARTMENT_HEAD))
    users = User.objects.bulk_create(users, batch_size=2_000)
    memberships = [
        Membership(user=user, group=group, role=role)
        for user, (group, role) in zip(users, roles, strict=True)
    ]
    memberships += [
        Membership(user=user, group=group, role=Membership.Role.TEAM_LEAD)
        for user, (group, role) in zip(users, roles, strict=True)
        if role == Membership.Role.MEMBER and user.username.endswith("-0")
    ]
    Membership.objects.bulk_create(memberships, batch_size=2_000)
    Project.objects.bulk_create(
        [
            Project(group=team, name=f"{team.slug}-p{n}")
            for team in added[Group.Kind.TEAM]
            for n in range(PROJECTS_PER_TEAM)
        ],
        batch_size=2_000,
    )


def pools(size: Size, rng: random.Random) -> None:
    """The pools beyond the demo's (Kubernetes, bare metal and HPC in turn, of the demo's GPU types),
    each with its first capacity row, and a profile of one GPU type per ten of them."""
    types = {t.name: t for t in GpuType.objects.filter(name__in=NEW_GPU_TYPES)}
    new = []
    for n in range(max(0, size.pools - Pool.objects.count())):
        kind = POOL_KINDS[n % len(POOL_KINDS)]
        region, country = REGIONS[n % len(REGIONS)]
        new.append(
            Pool(
                name=f"{PREFIX}pool-{n:04}",
                kind=kind,
                gpu_type=types[NEW_GPU_TYPES[(n // POOLS_PER_PROFILE) % len(NEW_GPU_TYPES)]],
                capacity=Decimal(rng.choice([8, 16, 32, 64])),
                region=region,
                country=country,
                multi_node=kind in Pool.MULTI_NODE_KINDS,
            )
        )
    new = Pool.objects.bulk_create(new, batch_size=2_000)
    PoolCapacityChange.objects.bulk_create(
        [
            PoolCapacityChange(pool=p, at=SINCE_EVER, capacity=p.capacity, enabled=True, reason="demo estate")
            for p in new
        ]
    )
    links = []
    for start in range(0, len(new), POOLS_PER_PROFILE):
        members = new[start : start + POOLS_PER_PROFILE]
        gpus = [1, 2, 4][(start // POOLS_PER_PROFILE) % 3]
        profile = Profile.objects.create(
            name=f"{PREFIX}{members[0].gpu_type.name.lower()}-{gpus}-{start // POOLS_PER_PROFILE:03}",
            gpus=Decimal(gpus),
            time_weight=Decimal(1),
            description=f"{gpus} x {members[0].gpu_type.name} on {len(members)} pools",
        )
        links += [ProfilePool(profile=profile, pool=p, pool_rank=rank) for rank, p in enumerate(members)]
    ProfilePool.objects.bulk_create(links, batch_size=2_000)


def resources(teams: list[Group], rng: random.Random) -> None:
    """Two compute resources per new team on the new profiles (the demo's ``gpu-flex`` when there
    are none), last in each profile's queuing order, as ``policies.connect`` ranks them."""
    profiles = list(Profile.objects.filter(name__startswith=PREFIX).order_by("pk")) or [
        Profile.objects.get(name="gpu-flex")
    ]
    policy_of = dict(ResourcePolicy.objects.filter(group__in=teams).values_list("group_id", "pk"))
    ranks = {p.pk: ComputeResource.objects.filter(profile=p).count() for p in profiles}
    made = []
    for n, team in enumerate(teams):
        for profile in {profiles[n % len(profiles)], rng.choice(profiles)}:
            made.append(
                ComputeResource(
                    name=f"{team.slug}/{profile.name}",
                    policy_id=policy_of[team.pk],
                    profile=profile,
                    queuing_rank=ranks[profile.pk],
                )
            )
            ranks[profile.pk] += 1
    ComputeResource.objects.bulk_create(made, batch_size=2_000)
