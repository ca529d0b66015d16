"""Celery task of the cloud pools: the autoscaler's pass, on its own queue ``autoscale``."""

from celery import shared_task

from apps.cloud import services


@shared_task(name="klique.cloud.autoscale", ignore_result=True)
def autoscale() -> dict[str, dict]:
    return services.autoscale()
