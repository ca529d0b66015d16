"""Celery tasks of the ledger: thin wrappers that call the rollups."""

from celery import shared_task

from apps.ledger import rollups


@shared_task(name="klique.ledger.rollup", ignore_result=True)
def rollup() -> int:
    """Bring the hourly and daily rollups up to the last closed hour."""
    return rollups.refresh()
