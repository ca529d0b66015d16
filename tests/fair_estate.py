"""A department lending "fair" to two teams, for the tests of where people see fair shares (the
selector, the department page, the metrics, the task API and ``klique status``).

The estate: one enabled pool of 100 GPUs; department Vision (reservation 0, limit 40, lending
fair) with teams Perception (weight 1) and Mapping (weight 3), each reservation 0 and limit 40.
Perception runs 20 GPUs, Mapping runs nothing and has 40 GPUs waiting. The children borrow 20;
the department may take min(80 idle, 40 - 20) = 20 more: 40 to share, 1 : 3, so Perception's
fair share is 10 (it holds 20) and Mapping's 30 (it holds 0)."""

from dataclasses import dataclass
from decimal import Decimal

from apps.accounts.models import Group, Membership, User
from apps.policies.models import ComputeResource, ResourcePolicy
from apps.pools.models import Pool
from apps.tasks.models import Task
from tests.factories import GroupFactory, PolicyFactory, PoolFactory, ProfileFactory, UserFactory


@dataclass
class FairEstate:
    pool: Pool
    department: ResourcePolicy
    perception: ResourcePolicy
    mapping: ResourcePolicy
    perception_resource: ComputeResource
    mapping_resource: ComputeResource
    user: User
    waiting: Task


def task(resource, user, gpus, *, state=Task.State.QUEUED, pool=None, priority=0, nodes=1) -> Task:
    return Task.objects.create(
        user=user,
        compute_resource=resource,
        command="x",
        gpus=Decimal(gpus),
        nodes=nodes,
        state=state,
        pool=pool,
        priority=priority,
    )


def fair_estate(lending: str = "fair") -> FairEstate:
    pool = PoolFactory(capacity=Decimal(100))
    profile = ProfileFactory(size_from_task=True)
    dept = GroupFactory(name="Vision", slug="vision", kind=Group.Kind.DEPARTMENT)
    department = PolicyFactory(group=dept, reservation=0, limit=40, lending=lending)
    teams = []
    for name, weight in (("Perception", 1), ("Mapping", 3)):
        group = GroupFactory(name=name, slug=name.lower(), parent=dept)
        teams.append(PolicyFactory(group=group, reservation=0, limit=40, over_quota_weight=weight))
    perception, mapping = teams
    resources = [
        ComputeResource.objects.create(name=f"{p.group.slug}/a100", policy=p, profile=profile) for p in teams
    ]
    user = UserFactory(username="dev-mapping")
    Membership.objects.create(user=user, group=mapping.group, role=Membership.Role.MEMBER)
    task(resources[0], user, 12, state=Task.State.RUNNING, pool=pool)
    task(resources[0], user, 4, state=Task.State.RUNNING, pool=pool, nodes=2)
    waiting = task(resources[1], user, 40, priority=200)
    return FairEstate(pool, department, perception, mapping, *resources, user, waiting)
