"""With a broker (Redis), the delivery goes through Celery: a real worker takes it from the queue
after the commit and sends it."""

import time

import pytest
from celery.contrib.testing.worker import start_worker
from django.db import transaction

from apps.webhooks import services
from apps.webhooks.models import Webhook, WebhookDelivery
from klique.celery import app
from tests.factories import GroupFactory


@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_sends_the_delivery_queued_on_the_broker(receiver, settings):
    settings.WEBHOOK_SEND_INLINE = False
    team = GroupFactory(name="Detection")
    Webhook.objects.create(group=team, url=receiver.url(), format="generic")
    with start_worker(app, pool="solo", perform_ping_check=False, shutdown_timeout=10):
        with transaction.atomic():
            services.enqueue_for(team, "preemption", "Preempted", "One task.")
        delivery = WebhookDelivery.objects.get()
        deadline = time.monotonic() + 30
        while delivery.state == "pending" and time.monotonic() < deadline:
            time.sleep(0.1)
            delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("delivered", 1)
    assert receiver.requests[0]["body"]["title"] == "Preempted"
