"""Work that stops fitting after its submit (a pool shrunk or disabled) waits with the verdict
``never_fits`` naming the cause, and IT's view lists it; once a pool can hold it again, the next
pass places it and it leaves the list. On the database, through real passes."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.test import Client

from apps.accounts.models import Membership
from apps.engine import services
from apps.policies import services as policies
from apps.pools.models import Pool
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.factories import GroupFactory, MembershipFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)


@pytest.fixture
def eight():
    """An 8-GPU task of profile p8 (dgx 8 GPUs, small 4 GPUs), submitted while it fits."""
    profile = ProfileFactory(name="p8", gpus=8)
    for pool in (PoolFactory(name="dgx", capacity=8), PoolFactory(name="small", capacity=4)):
        policies.link_pool(profile, pool)
    org = GroupFactory(kind="organisation", name="Org", slug="org")
    team = GroupFactory(parent=org, name="Team", slug="team")
    resource = policies.connect(
        policy=policies.create_policy(group=team, reservation=0, limit=16), profile=profile
    )
    return tasks.submit(user=UserFactory(), compute_resource=resource, command="train")


def verdict(task) -> dict:
    return Task.objects.get(pk=task.pk).verdict


def it_page() -> str:
    it = MembershipFactory(group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN).user
    client = Client()
    client.force_login(it)
    return client.get("/it/?export=csv&table=neverfits").content.decode()


def test_a_pool_shrunk_below_the_task_gives_never_fits_capacity_and_it_sees_it(eight):
    Pool.objects.filter(name="dgx").update(capacity=Decimal(6))
    services.run_pass(now=T0)
    found = verdict(eight)
    assert (found["rule"], found["cause"], found["pools"]) == ("never_fits", "capacity", ["dgx"])
    assert found["message"] == (
        "Never fits now: it is larger than the largest enabled pool of its profile (dgx). "
        "IT must raise a pool's capacity or add a larger pool."
    )
    assert Task.objects.get(pk=eight.pk).state == Task.State.QUEUED
    event = TaskEvent.objects.get(task=eight, kind=TaskEvent.Kind.VERDICT)
    assert event.reason == "never_fits"
    rows = it_page().splitlines()
    assert [row.split(",")[:5] for row in rows[1:]] == [
        [str(eight.pk), "Team", eight.compute_resource.name, "8.000", "larger than every pool"]
    ]


def test_the_largest_pool_disabled_names_the_largest_enabled_one(eight):
    Pool.objects.filter(name="dgx").update(enabled=False)
    services.run_pass(now=T0)
    found = verdict(eight)
    assert (found["rule"], found["cause"], found["pools"]) == ("never_fits", "capacity", ["small"])


def test_every_pool_disabled_gives_never_fits_no_pool(eight):
    Pool.objects.update(enabled=False)
    services.run_pass(now=T0)
    found = verdict(eight)
    assert (found["rule"], found["cause"]) == ("never_fits", "no_pool")
    assert found["message"] == (
        "Never fits now: no pool of its profile is enabled. IT must enable or add a pool."
    )
    assert str(eight.pk) in it_page()


def test_once_a_pool_holds_it_again_the_next_pass_places_it_and_it_leaves_the_list(eight):
    Pool.objects.filter(name="dgx").update(capacity=Decimal(6))
    services.run_pass(now=T0)
    assert verdict(eight)["rule"] == "never_fits"
    Pool.objects.filter(name="dgx").update(capacity=Decimal(8))
    services.run_pass(now=T0 + timedelta(seconds=1))
    placed = Task.objects.get(pk=eight.pk)
    assert placed.state == Task.State.PLACED and placed.pool.name == "dgx"
    assert it_page().splitlines()[1:] == []
