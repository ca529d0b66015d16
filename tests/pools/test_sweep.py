"""The sweep: a worker silent past the heartbeat timeout is lost, its work requeued at the front
in its old order and charged only until the last heartbeat; a placement no worker claimed within
the claim timeout goes back to its queue; after an outage of the control plane every worker gets
a full timeout to check back in."""

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from apps.ledger.models import UsageInterval
from apps.pools.models import Worker
from apps.tasks import selectors
from apps.tasks.models import Task, TaskEvent
from apps.workers import services as protocol
from tests.pools.conftest import sweep_steadily

pytestmark = pytest.mark.django_db


def claim(worker, at):
    return protocol.claim(worker, free=[1000] * 8, free_gpus=None, max_tasks=8, now=at)


def test_a_silent_worker_is_lost_and_its_work_requeued_in_order_charged_until_its_last_heartbeat(
    pool, enrol, place
):
    t0 = timezone.now() - timedelta(minutes=5)
    worker, _ = enrol()
    tasks = place(pool, 3, at=t0)
    claim(worker, t0 + timedelta(seconds=1))
    heard = t0 + timedelta(seconds=10)
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=heard)
    totals = sweep_steadily(t0, t0 + timedelta(seconds=60))
    assert totals["lost_workers"] == 1 and totals["requeued"] == 3
    worker.refresh_from_db()
    assert worker.state == Worker.State.LOST and worker.lost_at is not None
    positions = []
    for task in tasks:
        task.refresh_from_db()
        assert task.state == Task.State.QUEUED and task.last_preemption_reason == "worker_lost"
        assert UsageInterval.objects.get(task=task).end == heard
        positions.append(selectors.queue_position(task))
    assert positions == [1, 2, 3]


def test_a_worker_that_heartbeats_in_time_is_not_lost(pool, enrol, place):
    t0 = timezone.now() - timedelta(minutes=5)
    worker, _ = enrol()
    place(pool, 1, at=t0)
    claim(worker, t0)
    at = t0
    while at < t0 + timedelta(minutes=2):
        protocol.heartbeat(worker, tasks=list(worker.tasks.values_list("pk", flat=True)), now=at)
        protocol.sweep(at)
        at += timedelta(seconds=10)
    worker.refresh_from_db()
    assert worker.state == Worker.State.ACTIVE and worker.tasks.get().state == Task.State.PLACED


def test_a_placement_no_worker_claims_goes_back_to_its_queue(pool, place):
    t0 = timezone.now() - timedelta(minutes=10)
    (task,) = place(pool, 1, at=t0)
    timeout = timedelta(seconds=settings.WORKER_CLAIM_TIMEOUT_S)
    assert protocol.sweep(t0 + timeout - timedelta(seconds=1))["unclaimed"] == 0
    assert protocol.sweep(t0 + timeout + timedelta(seconds=1))["unclaimed"] == 1
    task.refresh_from_db()
    assert task.state == Task.State.QUEUED and task.last_preemption_reason == "unclaimed"
    assert task.events.filter(kind=TaskEvent.Kind.REQUEUED, reason="unclaimed").exists()
    assert UsageInterval.objects.get(task=task).end == t0 + timeout + timedelta(seconds=1)


def test_a_pool_with_its_own_claim_timeout_keeps_a_placement_waiting_that_long(pool, place):
    """A cloud pool's claim timeout covers a node's boot (the autoscaler sets it): its placements
    wait for the node instead of going back to the queue after the plain claim timeout."""
    from tests.factories import PoolFactory

    booting = PoolFactory(name="cloud-boots", claim_timeout_s=900)
    t0 = timezone.now() - timedelta(minutes=30)
    (plain,) = place(pool, 1, at=t0)
    (waiting,) = place(booting, 1, at=t0)
    plain_timeout = timedelta(seconds=settings.WORKER_CLAIM_TIMEOUT_S)
    assert protocol.sweep(t0 + plain_timeout + timedelta(seconds=1))["unclaimed"] == 1
    assert protocol.sweep(t0 + timedelta(seconds=899))["unclaimed"] == 0
    assert protocol.sweep(t0 + timedelta(seconds=901))["unclaimed"] == 1
    plain.refresh_from_db()
    waiting.refresh_from_db()
    assert plain.state == waiting.state == Task.State.QUEUED


def test_after_a_control_plane_outage_workers_get_a_full_timeout_to_check_back_in(pool, enrol, place):
    t0 = timezone.now() - timedelta(minutes=30)
    worker, _ = enrol()
    place(pool, 1, at=t0)
    claim(worker, t0)
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=t0)
    protocol.sweep(t0)
    back = t0 + timedelta(minutes=10)
    assert protocol.sweep(back)["lost_workers"] == 0
    protocol.heartbeat(
        worker, tasks=list(worker.tasks.values_list("pk", flat=True)), now=back + timedelta(seconds=5)
    )
    assert sweep_steadily(back, back + timedelta(seconds=30))["lost_workers"] == 0
    worker.refresh_from_db()
    assert worker.state == Worker.State.ACTIVE


def test_a_worker_that_does_not_check_back_in_after_an_outage_is_lost(pool, enrol):
    t0 = timezone.now() - timedelta(minutes=30)
    worker, _ = enrol()
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=t0)
    protocol.sweep(t0)
    back = t0 + timedelta(minutes=10)
    assert sweep_steadily(back, back + timedelta(seconds=25))["lost_workers"] == 0
    assert sweep_steadily(back + timedelta(seconds=35), back + timedelta(seconds=45))["lost_workers"] == 1


def test_a_lost_workers_canceled_work_ends_canceled(pool, enrol, place):
    from apps.tasks import services as lifecycle

    t0 = timezone.now() - timedelta(minutes=5)
    worker, _ = enrol()
    (task,) = place(pool, 1, at=t0)
    claim(worker, t0)
    lifecycle.cancel(task, at=t0 + timedelta(seconds=1))
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=t0)
    sweep_steadily(t0, t0 + timedelta(minutes=1))
    task.refresh_from_db()
    assert task.state == Task.State.CANCELED


def test_the_sweep_runs_as_a_celery_task_on_the_beat():
    from apps.workers.tasks import sweep

    assert sweep.name == "klique.pools.sweep"
    assert settings.CELERY_BEAT_SCHEDULE["worker-sweep"]["task"] == "klique.pools.sweep"
    assert sweep.apply().get() == {"lost_workers": 0, "requeued": 0, "unclaimed": 0, "stranded": 0}


@pytest.mark.parametrize("state", [Worker.State.LOST, Worker.State.RETIRED])
def test_work_held_by_a_worker_that_is_not_active_is_requeued_charged_until_it_was_last_heard(
    pool, enrol, place, state
):
    """A row no other check looks at (the unclaimed release needs no worker, the lost check an
    active one), as an older release that let a lost worker claim left behind."""
    t0 = timezone.now() - timedelta(minutes=5)
    worker, _ = enrol()
    tasks = place(pool, 2, at=t0)
    claim(worker, t0 + timedelta(seconds=1))
    Task.objects.filter(pk=tasks[0].pk).update(state=Task.State.RUNNING, started_at=t0 + timedelta(seconds=2))
    heard = t0 + timedelta(seconds=20)
    Worker.objects.filter(pk=worker.pk).update(state=state, last_heartbeat=heard, lost_at=heard)
    swept_at = t0 + timedelta(seconds=40)
    assert protocol.sweep(swept_at) == {"lost_workers": 0, "requeued": 0, "unclaimed": 0, "stranded": 2}
    positions = []
    for task in tasks:
        task.refresh_from_db()
        assert task.state == Task.State.QUEUED and task.worker is None
        assert task.last_preemption_reason == "worker_lost" and task.preemption_count == 1
        assert UsageInterval.objects.get(task=task).end == heard
        assert task.events.get(kind=TaskEvent.Kind.REQUEUED).at == swept_at
        positions.append(selectors.queue_position(task))
    assert positions == [1, 2]
    assert protocol.sweep(swept_at + timedelta(seconds=1))["stranded"] == 0


def test_a_sweep_leaves_the_work_of_active_workers_alone(pool, enrol, place):
    t0 = timezone.now() - timedelta(minutes=5)
    worker, _ = enrol()
    (task,) = place(pool, 1, at=t0)
    claim(worker, t0)
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=t0 + timedelta(seconds=30))
    assert protocol.sweep(t0 + timedelta(seconds=40))["stranded"] == 0
    task.refresh_from_db()
    assert task.state == Task.State.PLACED and task.worker == worker


def test_a_claim_that_raced_the_sweep_is_requeued_by_the_next_sweep(pool, enrol, place):
    """The claim locked the worker first, so that sweep skipped it; the next one finds it silent
    and takes back what it claimed, charged only until its last heartbeat."""
    t0 = timezone.now() - timedelta(minutes=5)
    worker, _ = enrol()
    (task,) = place(pool, 1, at=t0)
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=t0)
    sweep_steadily(t0, t0 + timedelta(seconds=20))
    claim(worker, t0 + timedelta(seconds=29))
    totals = sweep_steadily(t0 + timedelta(seconds=30), t0 + timedelta(seconds=40))
    assert totals["lost_workers"] == 1 and totals["requeued"] == 1
    task.refresh_from_db()
    assert task.state == Task.State.QUEUED and task.last_preemption_reason == "worker_lost"
    assert UsageInterval.objects.get(task=task).end == t0  # the placement, as the heartbeat was before
