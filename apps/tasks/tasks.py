"""Celery tasks of the tasks app: the beat that submits due schedules."""

from celery import shared_task

from apps.tasks import services


@shared_task(name="klique.tasks.submit_due_schedules", ignore_result=True)
def submit_due_schedules() -> int:
    return services.submit_due_schedules()
