"""The heartbeat interval grows with the estate so its daemons' periodic syncs stay within
``WORKER_SYNCS_PER_S``, the timeout keeps its ratio to it, and no worker is marked lost sooner
than the timeout it was told (apps/workers/heartbeats.py)."""

from datetime import UTC, datetime, timedelta

import pytest

from apps.pools.models import Worker
from apps.workers import heartbeats
from apps.workers import services as protocol
from tests.engine_live.test_pass import estate
from tests.pools.test_observed_capacity import enrol

pytestmark = pytest.mark.django_db
T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)


@pytest.fixture(autouse=True)
def counted_afresh():
    heartbeats.forget()
    yield
    heartbeats.forget()


@pytest.mark.parametrize(
    ("active", "interval", "timeout"),
    [(1, 5, 30), (500, 5, 30), (501, 5.01, 30.06), (1000, 10, 60), (2000, 20, 120)],
)
def test_the_interval_keeps_the_estates_syncs_within_its_budget_and_the_timeout_keeps_its_ratio(
    active, interval, timeout
):
    """Rule (defaults: 5 s, 30 s, 100 syncs a second): interval = max(5, daemons / 100), timeout =
    max(30, interval x 6). 2,000 daemons heartbeat every 20 s, 100 a second, lost after 120 s."""
    told = heartbeats.timing_for(active)
    assert (told.interval_s, told.timeout_s) == (pytest.approx(interval), pytest.approx(timeout))


def test_enrolment_and_each_heartbeat_tell_the_estates_timing(settings):
    settings.WORKER_SYNCS_PER_S = 1
    pool, _, _ = estate()
    workers = [enrol(pool, f"node-{i}", 1, at=T0) for i in range(10)]
    heartbeats.forget()
    answer = protocol.heartbeat(workers[0], tasks=[], now=T0 + timedelta(seconds=1))
    assert (answer["heartbeat_s"], answer["heartbeat_timeout_s"], answer["claim_max_s"]) == (10, 60, 10)
    assert Worker.objects.get(pk=workers[0].pk).heartbeat_timeout == timedelta(seconds=60)


def test_a_worker_is_never_lost_sooner_than_the_timeout_it_was_told(settings):
    """Rule: told 60 s while the estate was large, a worker silent for 45 s is not lost once the
    estate is small again (today's timeout 30 s); at 61 s it is."""
    settings.WORKER_SYNCS_PER_S = 1
    pool, _, _ = estate()
    workers = [enrol(pool, f"node-{i}", 1, at=T0) for i in range(10)]
    heartbeats.forget()
    protocol.heartbeat(workers[0], tasks=[], now=T0)
    Worker.objects.exclude(pk=workers[0].pk).update(state=Worker.State.RETIRED)
    settings.WORKER_SYNCS_PER_S = 100
    heartbeats.forget()
    assert heartbeats.timing().timeout_s == 30
    for second in range(0, 46, 5):
        protocol.sweep(T0 + timedelta(seconds=second))
    assert Worker.objects.get(pk=workers[0].pk).state == Worker.State.ACTIVE
    for second in range(50, 66, 5):
        protocol.sweep(T0 + timedelta(seconds=second))
    assert Worker.objects.get(pk=workers[0].pk).state == Worker.State.LOST
