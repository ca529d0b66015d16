"""A small estate for the agent tests: a team with a policy (limit 4 GPUs at once) on one pool of 8
GPUs, its owner (a member) with an agent, the team's lead, and a stranger leading another team."""

from dataclasses import dataclass
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from apps.accounts import agents
from apps.accounts import services as accounts
from apps.accounts.models import Agent, Membership, User
from apps.policies import services as policies
from apps.policies.models import ComputeResource
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

Role = Membership.Role


@dataclass
class Estate:
    resource: ComputeResource
    other: ComputeResource
    owner: User
    lead: User
    stranger: User
    it: User
    agent: Agent
    token: str
    pool: object


@pytest.fixture
def estate(db) -> Estate:
    org = GroupFactory(kind="organisation", name="Acme", slug="acme")
    team = GroupFactory(parent=org, name="Vision", slug="vision")
    other_team = GroupFactory(parent=org, name="Speech", slug="speech")
    pool = PoolFactory(name="onprem", capacity=Decimal("8"))
    profile = ProfileFactory(name="a100-any", gpus=1, size_from_task=True)
    policies.link_pool(profile, pool)
    policy = policies.create_policy(group=team, reservation=0, limit=4)
    other_policy = policies.create_policy(group=other_team, reservation=0, limit=4)
    people = {}
    for name, role, group in [
        ("vera", Role.MEMBER, team),
        ("lena", Role.TEAM_LEAD, team),
        ("sam", Role.TEAM_LEAD, other_team),
        ("ivy", Role.IT_ADMIN, org),
    ]:
        people[name] = UserFactory(username=name)
        accounts.add_membership(user=people[name], group=group, role=role)
    agent, token = agents.create_agent(owner=people["vera"], name="eval-bot", purpose="nightly evals")
    return Estate(
        resource=policies.connect(policy=policy, profile=profile),
        other=policies.connect(policy=other_policy, profile=profile),
        owner=people["vera"],
        lead=people["lena"],
        stranger=people["sam"],
        it=people["ivy"],
        agent=agent,
        token=token,
        pool=pool,
    )


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def client_for(user: User) -> APIClient:
    return bearer(accounts.create_api_token(user=user, name="tests")[1])
