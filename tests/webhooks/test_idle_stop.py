"""An idle stop goes to the webhooks of the session's group (its compute resource's policy's
group) subscribed to idle stops, after the stop commits."""

from datetime import timedelta

import pytest

from apps.sessions import services as sessions
from apps.sessions.models import ProfileIdleLimits
from apps.webhooks.models import Webhook, WebhookDelivery
from tests.sessions.conftest import estate, jupyter, running, worker  # noqa: F401 (fixtures)

pytestmark = pytest.mark.django_db


def test_an_idle_stop_goes_to_the_webhook_of_the_sessions_group(
    receiver,
    estate,  # noqa: F811
    jupyter,  # noqa: F811
    running,  # noqa: F811
    django_capture_on_commit_callbacks,
):
    resource = estate.vision_a100
    task = running(sessions.start(user=estate.member, compute_resource=resource, session_kind=jupyter))
    ProfileIdleLimits.objects.create(profile=resource.profile, max_lifetime_s=60)
    vision = resource.policy.group
    Webhook.objects.create(group=vision, url=receiver.url("/vision"), format="generic", kinds=["idle_stop"])
    Webhook.objects.create(group=vision.parent, url=receiver.url("/dept"), kinds=["budget_alert"])
    with django_capture_on_commit_callbacks(execute=True):
        assert sessions.check_idle(task.started_at + timedelta(seconds=60))["stopped"] == 1
    (request,) = receiver.requests
    body = request["body"]
    assert request["path"] == "/vision" and body["kind"] == "idle_stop" and body["group"] == "Vision"
    assert body["title"] == f"Session {task} stopped by its idle limit"
    assert f"of {estate.member} was stopped: its maximum lifetime for 60 s." in body["text"]
    assert body["link"].endswith(f"/work/tasks/{task.pk}/")
    assert WebhookDelivery.objects.get().state == "delivered"
