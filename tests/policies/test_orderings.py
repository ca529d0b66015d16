"""The three orderings IT sets are saved and read back in order."""

import pytest

from apps.policies import services
from apps.policies.models import ComputeResource, ProfilePool
from tests.factories import PolicyFactory, PoolFactory, ProfileFactory

pytestmark = pytest.mark.django_db


def test_pool_order_of_a_profile_is_kept():
    profile = ProfileFactory()
    a, b, c = PoolFactory(name="a"), PoolFactory(name="b"), PoolFactory(name="c")
    for pool in (a, b, c):
        services.link_pool(profile, pool)
    services.set_pool_order(profile, [c, a, b])
    links = ProfilePool.objects.filter(profile=profile).order_by("pool_rank")
    assert [link.pool.name for link in links] == ["c", "a", "b"]


def test_execution_priority_of_a_pool_is_kept_apart_from_pool_order():
    pool = PoolFactory()
    small, large = ProfileFactory(name="small"), ProfileFactory(name="large")
    services.link_pool(large, pool)
    services.link_pool(small, pool)
    services.set_execution_order(pool, [small, large])
    links = ProfilePool.objects.filter(pool=pool).order_by("profile_rank")
    assert [link.profile.name for link in links] == ["small", "large"]
    assert [link.pool_rank for link in links] == [0, 0]


def test_queuing_priority_of_a_profile_is_kept():
    profile = ProfileFactory()
    p1, p2, p3 = PolicyFactory(), PolicyFactory(), PolicyFactory()
    for policy in (p1, p2, p3):
        services.connect(policy=policy, profile=profile)
    services.set_queuing_order(profile, [p3, p1, p2])
    ranked = ComputeResource.objects.filter(profile=profile).order_by("queuing_rank")
    assert [r.policy_id for r in ranked] == [p3.pk, p1.pk, p2.pk]


def test_an_ordering_must_name_linked_items_only_once():
    profile = ProfileFactory()
    a = PoolFactory()
    services.link_pool(profile, a)
    with pytest.raises(ValueError, match="pool order"):
        services.set_pool_order(profile, [a, a])
    with pytest.raises(ValueError, match="pool order"):
        services.set_pool_order(profile, [PoolFactory()])


def test_items_left_out_of_an_ordering_keep_their_place_after_the_named_ones():
    profile = ProfileFactory()
    a, b, c = PoolFactory(name="a"), PoolFactory(name="b"), PoolFactory(name="c")
    for pool in (a, b, c):
        services.link_pool(profile, pool)
    services.set_pool_order(profile, [c])
    links = ProfilePool.objects.filter(profile=profile).order_by("pool_rank")
    assert [link.pool.name for link in links] == ["c", "a", "b"]
