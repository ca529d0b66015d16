"""Pools that know their own capacity (docs/engine.md, "Observed capacity"): the engine places
against what IT declared, but never more than the pool's live worker daemons have once one serves
it; every change of those daemons' GPUs (enrolment, another count in a heartbeat, a daemon lost,
back, retired) goes into the pool's capacity history, whose in-force capacity the ledger's unused
capacity counts; a pool no daemon ever served, and an autoscaled cloud pool, keep their declared
capacity."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.engine import services as engine
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, PoolCapacityChange, Worker
from apps.pools.selectors import capacity_segments, effective_capacity
from apps.pools.services.estate import record_observed
from apps.tasks.models import Task
from apps.workers import services as protocol
from tests.engine_live.test_pass import estate, submit

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)


def enrol(pool, hostname, gpus, at=T0):
    token = EnrolmentToken(pool=pool, name=hostname)
    raw = pools.issue_enrolment_token(token, now=at)
    assert raw
    worker, _ = protocol.enrol(token, hostname=hostname, gpus=Decimal(gpus), mode="process", now=at)
    return worker


def placed(items):
    return sum(Task.objects.get(pk=t.pk).state == Task.State.PLACED for t in items)


def observed_rows(pool):
    return [
        (row.capacity, row.observed)
        for row in PoolCapacityChange.objects.filter(pool=pool).order_by("at", "pk")
    ]


def test_effective_capacity_is_the_declared_capacity_capped_by_what_live_daemons_have():
    assert effective_capacity(Decimal(16), None) == 16  # no daemon ever served it
    assert effective_capacity(Decimal(16), Decimal(4)) == 4
    assert effective_capacity(Decimal(8), Decimal(12)) == 8  # never more than IT declared
    assert effective_capacity(Decimal(8), Decimal(0)) == 0


def test_a_pool_declared_at_16_gpus_with_4_gpus_of_live_daemons_takes_4_gpus_of_placements():
    pool, resource, _ = estate(capacity=16, res_a=0, limit=16)
    enrol(pool, "node-a", 4)
    work = submit(resource, 10)
    engine.run_pass()
    assert placed(work) == 4


def test_several_daemons_add_up_and_a_pool_no_daemon_ever_served_keeps_its_declared_capacity():
    pool, resource, _ = estate(capacity=16, res_a=0, limit=16)
    work = submit(resource, 20)
    engine.run_pass()
    assert placed(work) == 16  # set up, or served outside Klique: the declared capacity holds
    pool2, resource2, _ = estate_named("second", capacity=16)
    enrol(pool2, "node-a", 4)
    enrol(pool2, "node-b", 8)
    more = submit(resource2, 20)
    engine.run_pass()
    assert placed(more) == 12


def estate_named(name, capacity):
    from apps.policies import services as policies
    from tests.factories import GroupFactory, PoolFactory, ProfileFactory

    pool = PoolFactory(name=name, capacity=capacity)
    profile = ProfileFactory(name=f"{name}-1", gpus=1)
    policies.link_pool(profile, pool)
    policy = policies.create_policy(group=GroupFactory(name=name, slug=name), reservation=0, limit=capacity)
    return pool, policies.connect(policy=policy, profile=profile), None


def test_each_change_of_the_live_daemons_gpus_goes_into_the_capacity_history(settings):
    pool, _, _ = estate(capacity=16, res_a=0, limit=16)
    first = enrol(pool, "node-a", 4, at=T0)
    assert observed_rows(pool)[-1] == (16, 4)
    enrol(pool, "node-b", 8, at=T0 + timedelta(minutes=1))
    assert observed_rows(pool)[-1] == (16, 12)
    protocol.heartbeat(first, tasks=[], gpus="2", now=T0 + timedelta(minutes=2))  # a GPU fell off the bus
    assert observed_rows(pool)[-1] == (16, 10)
    rows = len(observed_rows(pool))
    protocol.heartbeat(Worker.objects.get(pk=first.pk), tasks=[], gpus="2", now=T0 + timedelta(minutes=3))
    assert len(observed_rows(pool)) == rows  # nothing changed: no row
    settings.WORKER_HEARTBEAT_TIMEOUT_S = 300
    Worker.objects.filter(hostname="node-b").update(last_heartbeat=T0)
    for minute in range(0, 6):  # sweeping without a gap; node-b silent past the timeout: lost
        protocol.sweep(T0 + timedelta(minutes=minute))
    Worker.objects.filter(hostname="node-a").update(last_heartbeat=T0 + timedelta(minutes=5))
    protocol.sweep(T0 + timedelta(minutes=5, seconds=30))
    assert Worker.objects.get(hostname="node-b").state == Worker.State.LOST
    assert observed_rows(pool)[-1] == (16, 2)
    protocol.heartbeat(
        Worker.objects.get(hostname="node-b"), tasks=[], gpus="8", now=T0 + timedelta(minutes=6)
    )
    assert observed_rows(pool)[-1] == (16, 10)  # back
    protocol.retire(Worker.objects.get(hostname="node-b"), T0 + timedelta(minutes=7))
    assert observed_rows(pool)[-1] == (16, 2)
    # IT declares another capacity: the observed one stays in force with it.
    pool.capacity = 12
    pool.save()
    assert observed_rows(pool)[-1] == (12, 2)


def test_rule_a_worker_back_from_lost_is_recorded_though_the_worker_the_call_holds_is_stale(settings):
    """The token cache hands the heartbeat a ``Worker`` read up to ``WORKER_CACHE_S`` before:
    active, with its old GPUs. What the row held is what counts."""
    pool, _, _ = estate(capacity=16, res_a=0, limit=16)
    remembered = enrol(pool, "node-a", 4, at=T0)
    assert remembered.state == Worker.State.ACTIVE
    Worker.objects.filter(pk=remembered.pk).update(state=Worker.State.LOST, lost_at=T0, gpus=6)
    record_observed(pool.pk, T0 + timedelta(minutes=1))
    assert observed_rows(pool)[-1] == (16, 0)
    protocol.heartbeat(remembered, tasks=[], gpus="4", now=T0 + timedelta(minutes=2))
    assert observed_rows(pool)[-1] == (16, 4)  # back, and 4 GPUs where the row said 6
    assert (remembered.state, remembered.gpus) == (Worker.State.ACTIVE, 4)


def test_a_restarted_daemon_re_enrolling_records_its_gpus_once():
    pool, _, _ = estate(capacity=16, res_a=0, limit=16)
    enrol(pool, "node-a", 4, at=T0)
    rows = observed_rows(pool)
    enrol(pool, "node-a", 4, at=T0 + timedelta(minutes=1))  # the same host again: no dip to 0
    assert observed_rows(pool) == rows


def test_the_capacity_in_force_counts_what_was_really_there():
    pool, _, _ = estate(capacity=16, res_a=0, limit=16)
    PoolCapacityChange.objects.filter(pool=pool).update(at=T0 - timedelta(hours=1))
    enrol(pool, "node-a", 4, at=T0)
    segments = capacity_segments(pool, T0 - timedelta(hours=1), T0 + timedelta(hours=1))
    assert [(s.in_force, s.observed) for s in segments] == [(16, None), (4, 4)]


def test_daemons_whose_gpus_add_up_past_what_a_column_holds_are_recorded_at_its_largest_value():
    pool, resource, _ = estate(capacity=16, res_a=0, limit=16)
    enrol(pool, "node-a", "9999999.999")
    enrol(pool, "node-b", "9999999.999")
    assert observed_rows(pool)[-1] == (16, Decimal("9999999.999"))
    work = submit(resource, 20)
    engine.run_pass()
    assert placed(work) == 16  # the declared capacity holds
