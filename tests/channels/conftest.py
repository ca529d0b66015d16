"""A small estate for the channel tests: an organisation with a department holding two teams,
each team with a policy and compute resources, and people in each role."""

from dataclasses import dataclass
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from apps.accounts import services as accounts
from apps.accounts.models import Membership, User
from apps.policies.models import ComputeResource
from tests.factories import (
    ComputeResourceFactory,
    GroupFactory,
    MembershipFactory,
    PolicyFactory,
    PoolFactory,
    ProfileFactory,
    ProjectFactory,
    UserFactory,
)

Role = Membership.Role


@dataclass
class Estate:
    vision_a100: ComputeResource
    vision_sized: ComputeResource
    vision_quarter: ComputeResource
    speech_a100: ComputeResource
    member: User
    other_member: User
    lead: User
    it: User
    finance: User
    outsider: User
    pool: object
    project: object


@pytest.fixture
def estate(db) -> Estate:
    org = GroupFactory(name="Acme", slug="acme", kind="organisation")
    dept = GroupFactory(name="Research", slug="research", kind="department", parent=org)
    vision = GroupFactory(name="Vision", slug="vision", parent=dept)
    speech = GroupFactory(name="Speech", slug="speech", parent=dept)
    PolicyFactory(group=org, reservation=8, limit=16)
    PolicyFactory(group=dept, reservation=8, limit=16)
    vision_policy = PolicyFactory(
        group=vision, reservation=2, limit=4, budget_hours=Decimal("100"), budget_period="week"
    )
    speech_policy = PolicyFactory(group=speech, reservation=2, limit=4)
    whole = ProfileFactory(name="a100", gpus=1)
    sized = ProfileFactory(name="a100-any", gpus=1, size_from_task=True)
    quarter = ProfileFactory(name="a100-quarter", gpus=Decimal("0.25"), time_weight=Decimal("0.5"))
    pool = PoolFactory(name="onprem")
    for profile in (whole, sized, quarter):
        profile.pools.add(pool)
    estate = Estate(
        vision_a100=ComputeResourceFactory(name="vision/a100", policy=vision_policy, profile=whole),
        vision_sized=ComputeResourceFactory(name="vision/a100-any", policy=vision_policy, profile=sized),
        vision_quarter=ComputeResourceFactory(
            name="vision/a100-quarter", policy=vision_policy, profile=quarter
        ),
        speech_a100=ComputeResourceFactory(name="speech/a100", policy=speech_policy, profile=whole),
        member=MembershipFactory(group=vision, user=UserFactory(username="vera")).user,
        other_member=MembershipFactory(group=vision, user=UserFactory(username="victor")).user,
        lead=MembershipFactory(group=speech, role=Role.TEAM_LEAD, user=UserFactory(username="sam")).user,
        it=MembershipFactory(group=org, role=Role.IT_ADMIN, user=UserFactory(username="ivy")).user,
        finance=MembershipFactory(group=org, role=Role.FINANCE, user=UserFactory(username="fin")).user,
        outsider=UserFactory(username="olga"),
        pool=pool,
        project=ProjectFactory(group=vision, name="detector"),
    )
    return estate


def token_for(user: User) -> str:
    return accounts.create_api_token(user=user, name="tests")[1]


def client_for(user: User, channel: str | None = None) -> APIClient:
    client = APIClient()
    headers = {"HTTP_X_KLIQUE_CHANNEL": channel} if channel else {}
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token_for(user)}", **headers)
    return client


@pytest.fixture
def api():
    return client_for
