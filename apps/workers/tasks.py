"""Celery tasks of the pools: the sweep for lost workers and unclaimed placements."""

from celery import shared_task
from django.utils import timezone

from apps.workers import services


@shared_task(name="klique.pools.sweep", ignore_result=True)
def sweep() -> dict[str, int]:
    return services.sweep(timezone.now())
