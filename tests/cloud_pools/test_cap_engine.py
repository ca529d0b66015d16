"""A reached cloud spend cap in the engine's pass and the autoscaler: the capped scope's new work
stays off every enabled cloud pool (its other pools still serve it), waits with the verdict
``cloud_cap_reached`` and the reset time, and launches no node; other scopes go on."""

from decimal import Decimal

import pytest

from apps.cloud.services import autoscaler, launching
from apps.engine import core
from apps.engine.apply import verdict_json
from apps.engine.loader import load
from apps.policies.models import ProfilePool
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from tests.cloud_pools.test_caps import NOW, april, estate, p5, set_cap  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


@pytest.fixture
def capped(april, settings):  # noqa: F811
    """April's spend: research (a business unit) 50 EUR, products 20; research capped at 40."""
    settings.CLOUD_CAP_CHECK_S = 0
    set_cap(april.bu, "40")
    set_cap(april.products, "100")
    for slug in ("pretraining", "ranking"):
        ProfilePool.objects.create(profile=april.resources[slug].profile, pool=april.cloud, pool_rank=0)
    return april


def submit(home, slug: str) -> Task:
    return lifecycle.submit(
        user=home.users["alice"], compute_resource=home.resources[slug], command="train", gpus=Decimal(1)
    )


def test_the_capped_business_units_policies_are_kept_off_every_cloud_pool_and_no_other(capped):
    loaded = load(NOW)
    [cap] = loaded.snapshot.caps
    research = {capped.dept, capped.team_a, capped.team_b, capped.team_c}
    assert cap.policies == frozenset(str(group.policy.pk) for group in research)
    assert cap.pools == (str(capped.cloud.pk),)
    assert cap.resets_at.isoformat() == "2026-05-01T00:00:00+00:00"
    assert loaded.group_names[cap.id] == capped.bu.name


def test_capped_work_waits_with_the_verdict_and_the_reset_time_while_other_scopes_are_placed(capped):
    held = submit(capped, "pretraining")
    free = submit(capped, "ranking")
    loaded = load(NOW)
    decisions = core.allocate(loaded.snapshot)
    assert [(p.task, p.pool) for p in decisions.placements] == [(str(free.pk), str(capped.cloud.pk))]
    verdict = verdict_json(decisions.verdict(str(held.pk)), loaded)
    assert verdict["rule"] == "cloud_cap_reached" and verdict["pools"] == ["cloud"]
    assert verdict["group"] == "Research" and verdict["reset_at"] == "2026-05-01T00:00:00+00:00"
    assert verdict["message"] == (
        "Cloud spend cap reached for Research: no new work goes to cloud until it resets at "
        "2026-05-01 00:00 UTC."
    )


def test_capped_work_placed_before_the_cap_goes_back_to_its_queue_and_launches_no_node(capped):
    from django.utils import timezone

    from apps.cloud.models import CloudPool
    from apps.tasks.models import TaskEvent

    held, free = submit(capped, "pretraining"), submit(capped, "ranking")
    loaded = Task.objects.filter(pk__in=[held.pk, free.pk]).order_by("pk")
    lifecycle.place_many([(task, capped.cloud) for task in loaded], NOW)
    capped_policies = autoscaler._capped_policies(NOW)
    assert held.compute_resource.policy_id in capped_policies
    assert capped.resources["ranking"].policy_id not in capped_policies
    cloud_pool = CloudPool.objects.get(pool=capped.cloud)

    assert autoscaler._requeue_capped(cloud_pool, capped_policies, NOW) == 1
    held.refresh_from_db()
    free.refresh_from_db()
    assert (held.state, held.pool_id, free.state) == (Task.State.QUEUED, None, Task.State.PLACED)
    event = TaskEvent.objects.filter(task=held, kind=TaskEvent.Kind.PREEMPTED).get()
    assert event.reason == Task.StopReason.CLOUD_CAP
    assert held.intervals.get().end == NOW, "charged only until it went back"
    demand, _, launches = launching.launch_plan(cloud_pool, timezone.now(), capped_policies)
    assert demand == Decimal(1) and len(launches) == 1, "a node for the uncapped work only"
