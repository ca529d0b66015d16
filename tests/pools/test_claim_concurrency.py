"""Ten claimers on one pool over thousands of placed tasks, at once on PostgreSQL: row locks
with SKIP LOCKED give each task to exactly one worker."""

import threading
from collections import Counter

import pytest
from django.db import connection
from django.utils import timezone

from apps.tasks.models import Task, TaskEvent
from apps.workers import services as protocol
from tests.factories import ComputeResourceFactory, UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

TASKS, CLAIMERS = 3000, 10


def placed_tasks(pool, n):
    """``n`` tasks placed on ``pool`` in one insert (the claim reads only the task rows)."""
    resource, user, now = ComputeResourceFactory(), UserFactory(), timezone.now()
    Task.objects.bulk_create(
        Task(
            user=user,
            compute_resource=resource,
            command="true",
            gpus=1,
            state=Task.State.PLACED,
            queue_seq=i,
            pool=pool,
            placed_at=now,
        )
        for i in range(n)
    )


def test_ten_concurrent_claimers_claim_each_task_exactly_once(pool, enrol):
    placed_tasks(pool, TASKS)
    workers = [enrol(f"node-{i}")[0] for i in range(CLAIMERS)]
    claimed: dict[int, list[int]] = {w.pk: [] for w in workers}
    start = threading.Barrier(CLAIMERS)
    errors = []

    def claimer(worker):
        try:
            start.wait()
            while batch := protocol.claim(
                worker, free=[1000] * 8, free_gpus=None, max_tasks=8, now=timezone.now()
            ):
                claimed[worker.pk] += [c.task.pk for c in batch]
        except Exception as error:  # noqa: BLE001 - reported by the assertion below
            errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=claimer, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    every = [pk for pks in claimed.values() for pk in pks]
    assert len(every) == len(set(every)) == TASKS
    assert sum(1 for pks in claimed.values() if pks) > 1
    events = Counter(TaskEvent.objects.filter(kind=TaskEvent.Kind.CLAIMED).values_list("task_id", flat=True))
    assert len(events) == TASKS and set(events.values()) == {1}
    owners = dict(Task.objects.values_list("pk", "worker_id"))
    assert all(owners[pk] == worker for worker, pks in claimed.items() for pk in pks)
