"""Each team's fair share of its department's borrowed GPUs, as the pages, the metrics and the
API show it (``apps.tasks.fair_share``): the inputs of the one split (``apps.engine.core.fair``)
assembled from the live estate with exact figures, in a fixed number of queries."""

from decimal import Decimal

import pytest

from apps.policies.models import ResourcePolicy
from apps.tasks.fair_share import fair_shares_now
from apps.tasks.models import Task
from tests.factories import GroupFactory, PolicyFactory, WorkerFactory
from tests.fair_estate import fair_estate, task

pytestmark = pytest.mark.django_db


def figures(shares) -> dict[str, tuple[Decimal, Decimal]]:
    names = dict(ResourcePolicy.objects.values_list("pk", "group__slug"))
    return {names[pk]: (s.borrowed, s.share) for pk, s in shares.items()}


def test_what_the_children_borrow_and_may_still_take_is_split_by_weight():
    # Borrowed 20 (Perception: 12 + 2 nodes x 4) + min(80 idle, 40 - 20) = 40, split 1 : 3.
    fair_estate()
    assert figures(fair_shares_now()) == {
        "perception": (Decimal(20), Decimal(10)),
        "mapping": (Decimal(0), Decimal(30)),
    }


def test_a_child_wanting_less_than_its_share_leaves_the_rest_to_its_sibling():
    estate = fair_estate()
    Task.objects.filter(compute_resource=estate.mapping_resource).update(gpus=6)
    # Mapping wants only 6: Perception's share is the other 34, capped at what it uses and waits for (20).
    assert figures(fair_shares_now()) == {
        "perception": (Decimal(20), Decimal(20)),
        "mapping": (Decimal(0), Decimal(6)),
    }


def test_reservations_count_only_what_is_borrowed_above_them():
    estate = fair_estate()
    ResourcePolicy.objects.filter(pk=estate.perception.pk).update(reservation=8)
    # Perception borrows 20 - 8 = 12; available 12 + min(80, 20) = 32; caps 12 and 40: 8 and 24.
    assert figures(fair_shares_now()) == {
        "perception": (Decimal(12), Decimal(8)),
        "mapping": (Decimal(0), Decimal(24)),
    }


def test_idle_gpus_are_those_of_enabled_pools_at_the_capacity_the_engine_places_against():
    estate = fair_estate()
    WorkerFactory(pool=estate.pool, gpus=Decimal(24))  # the live daemons have 24 of the 100 declared
    # Idle 24 - 20 = 4: available 20 + 4 = 24, split 1 : 3 as 6 and 18.
    assert figures(fair_shares_now()) == {
        "perception": (Decimal(20), Decimal(6)),
        "mapping": (Decimal(0), Decimal(18)),
    }


def test_only_children_of_a_parent_lending_fair_have_a_fair_share():
    fair_estate(lending="priority")
    assert fair_shares_now() == {}


def test_the_shares_of_one_parent_can_be_asked_for():
    estate = fair_estate()
    assert set(fair_shares_now({estate.department.pk})) == {estate.perception.pk, estate.mapping.pk}
    assert fair_shares_now({estate.perception.pk}) == {}


def test_a_grandchild_counts_in_its_team_and_the_queries_do_not_grow_with_the_estate(
    django_assert_max_num_queries,
):
    estate = fair_estate()
    with django_assert_max_num_queries(8) as small:
        fair_shares_now()
    for n in range(5):
        sub = GroupFactory(parent=estate.mapping.group)
        child = PolicyFactory(group=sub, reservation=0, limit=4)
        resource = estate.mapping_resource.__class__.objects.create(
            name=f"sub-{n}", policy=child, profile=estate.mapping_resource.profile
        )
        task(resource, estate.user, 1, state=Task.State.RUNNING, pool=estate.pool)
    with django_assert_max_num_queries(len(small.captured_queries)):
        shares = fair_shares_now()
    # Mapping's subtree now runs 5 (borrowed 5); available 25 + min(75, 40 - 25) = 40: 10 and 30.
    assert figures(shares) == {
        "perception": (Decimal(20), Decimal(10)),
        "mapping": (Decimal(5), Decimal(30)),
    }


def test_a_fair_team_that_lends_fairly_in_turn_shares_out_at_most_its_own_share():
    estate = fair_estate()
    ResourcePolicy.objects.filter(pk=estate.mapping.pk).update(lending="fair")
    for slug in ("mapping-a", "mapping-b"):
        child = PolicyFactory(
            group=GroupFactory(slug=slug, parent=estate.mapping.group), reservation=0, limit=40
        )
        resource = estate.mapping_resource.__class__.objects.create(
            name=f"{slug}/a100", policy=child, profile=estate.mapping_resource.profile
        )
        task(resource, estate.user, 20)
    # Mapping's share is 30 (it wants 80, capped at 40): its teams share 30, not its limit of 40.
    shares = figures(fair_shares_now())
    assert shares["mapping"] == (Decimal(0), Decimal(30))
    assert shares["mapping-a"] == shares["mapping-b"] == (Decimal(0), Decimal(15))
    assert set(fair_shares_now({estate.mapping.pk})) == set(
        ResourcePolicy.objects.filter(group__slug__in=("mapping-a", "mapping-b")).values_list("pk", flat=True)
    )


def test_work_being_stopped_has_given_its_gpus_back_as_in_the_pass():
    estate = fair_estate()
    Task.objects.filter(compute_resource=estate.perception_resource, nodes=2).update(
        state=Task.State.STOPPING
    )
    # Perception borrows 12; available 12 + min(88, 28) = 40: 10 and 30 still.
    assert figures(fair_shares_now()) == {
        "perception": (Decimal(12), Decimal(10)),
        "mapping": (Decimal(0), Decimal(30)),
    }
