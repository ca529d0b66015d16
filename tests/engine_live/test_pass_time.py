"""Times that follow the order of what happened. A pass places work at a time no earlier than the
releases it saw: room freed by work that ended after the pass began must not be used at the
pass's start time, or the ledger charges both the ended work and its successor at once, more GPUs
than the pool has. A claim is never recorded before the placement it takes. (Both found by the
real-process crash suite, tests/crash/, under load.)"""

import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.db import connection
from django.utils import timezone

from apps.engine import held, services
from apps.ledger.models import UsageInterval
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken
from apps.tasks import services as tasks
from apps.tasks.models import Task
from apps.workers import services as protocol
from tests.crash.db import sweep_peak
from tests.engine_live.test_pass import estate, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_a_task_ending_while_a_pass_starts_is_never_overlapped_by_its_successor_on_the_ledger(monkeypatch):
    pool, ra, rb = estate(capacity=1, res_a=1)
    (first,) = submit(ra, 1)
    services.run_pass()
    (second,) = submit(ra, 1)
    real_load = held.load  # the pass's own transaction reads through the held snapshot

    def finish_first_then_load(now):
        """The first task's end is reported (from another connection) after the pass began."""

        def report():
            try:
                tasks.finish(Task.objects.get(pk=first.pk), exit_code=0, at=timezone.now())
            finally:
                connection.close()

        thread = threading.Thread(target=report)
        thread.start()
        thread.join()
        return real_load(now)

    monkeypatch.setattr(held, "load", finish_first_then_load)
    services.run_pass()
    monkeypatch.setattr(held, "load", real_load)
    services.run_pass()

    assert Task.objects.get(pk=second.pk).state == Task.State.PLACED
    changes = []
    for interval in UsageInterval.objects.filter(pool=pool):
        changes.append((interval.start, interval.gpus))
        if interval.end:
            changes.append((interval.end, -interval.gpus))
    peak, at = sweep_peak(changes)
    assert peak <= Decimal(pool.capacity), (
        f"{peak} GPUs charged at once on a pool of {pool.capacity}, at {at}"
    )


def test_a_claim_timed_before_the_placement_it_takes_is_recorded_at_the_placement():
    """The claim view takes its time as the request starts; a pass may commit a placement (at its
    own, later time) before the claim's query reads it. The claim is never before the placement."""
    pool, ra, rb = estate(capacity=4)
    token = EnrolmentToken(pool=pool, name="rack")
    pools.issue_enrolment_token(token, now=timezone.now())
    worker, _ = protocol.enrol(token, hostname="node-1", gpus=Decimal(4), mode="process", now=timezone.now())
    (task,) = submit(ra, 1)
    services.run_pass()
    placed_at = Task.objects.get(pk=task.pk).placed_at
    protocol.claim(worker, free=None, free_gpus=Decimal(4), max_tasks=1, now=placed_at - timedelta(seconds=1))
    claimed = Task.objects.get(pk=task.pk)
    assert claimed.claimed_at == placed_at
    assert claimed.events.get(kind="claimed").at == placed_at
