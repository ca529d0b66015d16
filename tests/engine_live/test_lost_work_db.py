"""Issue 37 part 4 on the database: the loader gives each running task's `saved_at` (the later of
its last checkpoint and its run's start), and a live reclaim takes the borrowed work that loses
least, recording the GPU-hours it lost on the preemption's event (a database replay of the rule)."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from apps.engine import loader, services
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.engine_live.test_pass import estate, submit
from tests.factories import WorkerFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
H = timedelta(hours=1)


def test_lost_work_live_reclaim_takes_the_borrowed_task_that_checkpointed():
    """B (reservation 0) runs two 1-GPU tasks on A's idle reservation of a 2-GPU pool, both
    started at T0; the older one (b1) checkpointed at T0 + 50 min. At T0 + 1 h A's task takes one
    back: newest first would take b2 (1 GPU-hour lost); least lost work takes b1 (10 min)."""
    pool, ra, rb = estate(capacity=2, res_a=2, res_b=0, limit=2)
    b1, b2 = submit(rb, 2)
    services.run_pass(now=T0)
    worker = WorkerFactory(pool=pool)
    placed = list(Task.objects.filter(pk__in=[b1.pk, b2.pk]).order_by("pk"))
    tasks.claim_many(worker, placed, T0)
    for task in Task.objects.filter(pk__in=[b1.pk, b2.pk]).order_by("pk"):
        tasks.mark_started(task, T0)
    tasks.record_checkpoint(Task.objects.get(pk=b1.pk), T0 + 50 * timedelta(minutes=1), now=T0 + H)
    saved = {t.id: t.saved_at for t in loader.load(T0 + H).snapshot.placed}
    assert saved == {str(b1.pk): T0 + timedelta(minutes=50), str(b2.pk): T0}
    [a1] = submit(ra, 1)
    services.run_pass(now=T0 + H)
    event = TaskEvent.objects.get(kind="preempted")
    assert (event.task_id, event.reason, event.lost_gpu_hours) == (b1.pk, "reclaim", Decimal("0.166667"))
    assert Task.objects.get(pk=b2.pk).state == "running"
