"""Celery tasks of the tasks app: the beat that submits due schedules, and the agents' cap sweep."""

from celery import shared_task

from apps.tasks import services
from apps.tasks.services import agents


@shared_task(name="klique.tasks.submit_due_schedules", ignore_result=True)
def submit_due_schedules() -> int:
    return services.submit_due_schedules()


@shared_task(name="klique.tasks.agent_caps", ignore_result=True)
def agent_caps() -> int:
    return agents.enforce_caps()
