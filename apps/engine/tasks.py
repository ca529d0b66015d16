"""Celery tasks of the engine: thin wrappers that call the services. Each runs on its own queue
and expires after its interval, so a slow pass never piles up behind itself. ``run_pass`` is also
queued on demand by ``apps.tasks.wake.request_pass``; after it, a request that came in during
the pass (or while another pass held the lock) queues one more."""

from celery import shared_task

from apps.engine import services
from apps.tasks import wake

LOCK_TAKEN = "another pass running"


@shared_task(name="klique.engine.run_pass", ignore_result=True)
def run_pass() -> None:
    wake.task_started()
    record = services.run_pass()
    wake.after_task_pass(lock_taken=record.skip_reason == LOCK_TAKEN)


@shared_task(name="klique.engine.run_meter", ignore_result=True)
def run_meter() -> None:
    services.run_meter()
