"""Celery task of what-if runs (queue ``whatif``: run a worker of its own so a long replay never
holds up the engine pass, docs/whatif.md)."""

from celery import shared_task

from apps.whatif import runs


@shared_task(name="klique.whatif.run", ignore_result=True, acks_late=True)
def run_whatif(pk: int) -> None:
    runs.execute(pk)


@shared_task(name="klique.whatif.fail_stale_runs", ignore_result=True)
def fail_stale_runs() -> None:
    runs.fail_stale_runs()
