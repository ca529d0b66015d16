"""Celery task of sessions: the idle check, on the sweep's queue."""

from celery import shared_task

from apps.sessions import services


@shared_task(name="klique.sessions.check_idle", ignore_result=True)
def check_idle() -> dict[str, int]:
    return services.check_idle()
