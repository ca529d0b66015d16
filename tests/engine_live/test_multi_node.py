"""Multi-node tasks through the live engine: a task counts GPUs x nodes against pool capacity,
reservation and limit, is placed whole on one pool, and its usage interval records GPUs x nodes."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.engine import services
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.pools.models import Pool
from apps.tasks import services as tasks
from apps.tasks.models import Task
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)


def estate(capacities, *, reservation=0, limit=16, size_from_task=False):
    """A profile of 2 GPUs per node on Kubernetes pools of the given capacities (pool order as
    given), and a compute resource of one group."""
    pools = [
        PoolFactory(name=f"k8s-{i}", kind=Pool.Kind.KUBERNETES, capacity=c) for i, c in enumerate(capacities)
    ]
    profile = ProfileFactory(name="a100x2", gpus=2, size_from_task=size_from_task)
    for pool in pools:
        policies.link_pool(profile, pool)
    policy = policies.create_policy(group=GroupFactory(slug="vision"), reservation=reservation, limit=limit)
    return pools, policies.connect(policy=policy, profile=profile)


def submit(resource, nodes=1, name=""):
    return tasks.submit(user=UserFactory(), compute_resource=resource, command="x", nodes=nodes, name=name)


def test_a_two_node_task_is_placed_only_on_a_pool_where_four_gpus_fit():
    (small, big), resource = estate([3, 4])
    task = submit(resource, nodes=2)
    services.run_pass(now=T0)
    task.refresh_from_db()
    assert task.state == Task.State.PLACED and task.pool == big


def test_a_two_node_task_waits_when_no_single_pool_has_room_for_all_its_gpus():
    # Three one-node tasks leave 1 and 3 GPUs free: 4 in all, but no pool has 4 (a task larger
    # than every pool is refused at submit instead).
    _, resource = estate([5, 5])
    for _ in range(3):
        submit(resource)
    services.run_pass(now=T0)
    task = submit(resource, nodes=2)
    services.run_pass(now=T0 + timedelta(seconds=1))
    task.refresh_from_db()
    assert task.state == Task.State.QUEUED and task.verdict["rule"] == "no_capacity"


def test_the_usage_interval_of_a_two_node_task_records_gpus_times_nodes():
    _, resource = estate([8])
    task = submit(resource, nodes=2)
    services.run_pass(now=T0)
    interval = UsageInterval.objects.get(task=task)
    assert interval.gpus == 4 and interval.end is None


@pytest.mark.parametrize("size_from_task", [False, True])
def test_the_limit_counts_gpus_times_nodes_and_smaller_work_behind_still_runs(size_from_task):
    _, resource = estate([16], limit=6, size_from_task=size_from_task)
    first, second = submit(resource, nodes=2, name="first"), submit(resource, nodes=2, name="second")
    single = submit(resource, nodes=1, name="single")
    services.run_pass(now=T0)
    states = {t.name: Task.objects.get(pk=t.pk) for t in (first, second, single)}
    assert states["first"].state == Task.State.PLACED
    assert states["second"].state == Task.State.QUEUED
    assert states["second"].verdict["rule"] == "policy_limit"
    assert states["single"].state == Task.State.PLACED  # 4 + 2 = 6: at the limit, not above


def test_reservation_reclaim_counts_the_borrowers_gpus_times_nodes():
    """Group A (reservation 4) waits for a 2-node task of its own while B's 2-node task (4 GPUs)
    borrows the whole pool: reclaim preempts B's one task, which frees all 4."""
    (pool,), resource_b = estate([4], reservation=0, limit=4)
    profile = resource_b.profile
    policy_a = policies.create_policy(group=GroupFactory(slug="speech"), reservation=4, limit=4)
    resource_a = policies.connect(policy=policy_a, profile=profile)
    borrower = submit(resource_b, nodes=2)
    services.run_pass(now=T0)
    assert Task.objects.get(pk=borrower.pk).state == Task.State.PLACED
    owner = submit(resource_a, nodes=2)
    services.run_pass(now=T0 + timedelta(seconds=1))
    assert Task.objects.get(pk=borrower.pk).state in (Task.State.STOPPING, Task.State.QUEUED)
    assert Task.objects.get(pk=borrower.pk).last_preemption_reason == "reclaim"
    services.run_pass(now=T0 + timedelta(seconds=2))
    assert Task.objects.get(pk=owner.pk).state == Task.State.PLACED
    assert UsageInterval.objects.get(task=owner).gpus == 4
