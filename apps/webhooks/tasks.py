"""Celery task of webhooks: send one delivery, retried with exponential backoff."""

from celery import shared_task
from django.conf import settings

from apps.webhooks import delivery


@shared_task(
    bind=True,
    name="klique.webhooks.deliver",
    ignore_result=True,
    autoretry_for=(delivery.DeliveryFailed,),
    max_retries=settings.WEBHOOK_MAX_ATTEMPTS - 1,
    retry_backoff=settings.WEBHOOK_RETRY_BACKOFF_S,
    retry_backoff_max=settings.WEBHOOK_RETRY_BACKOFF_MAX_S,
    retry_jitter=True,
)
def deliver(self, delivery_id: int) -> None:
    delivery.attempt(delivery_id, last=self.request.retries >= self.max_retries)
