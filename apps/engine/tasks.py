"""Celery tasks of the engine: thin wrappers that call the services. Each runs on its own queue
and expires after its interval, so a slow pass never piles up behind itself."""

from celery import shared_task

from apps.engine import services


@shared_task(name="klique.engine.run_pass", ignore_result=True)
def run_pass() -> None:
    services.run_pass()


@shared_task(name="klique.engine.run_meter", ignore_result=True)
def run_meter() -> None:
    services.run_meter()
