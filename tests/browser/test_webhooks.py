"""Webhooks in headless Chromium: Pretraining's lead opens the webhooks from the team page, adds a
Teams webhook for preemptions and idle stops, sends it a test message, and the delivery log shows
it delivered to a real receiver (rule: a group's lead configures its webhooks)."""

import pytest

from tests.webhooks.conftest import Receiver

pytestmark = pytest.mark.browser


@pytest.fixture
def receiver(settings):
    settings.WEBHOOK_SEND_INLINE = True
    server = Receiver()
    yield server
    server.close()


def test_a_team_lead_adds_a_teams_webhook_and_its_test_message_is_delivered(demo_estate, session, receiver):
    lead = session()
    lead.log_in("lead-pretraining")
    page = lead.open("/teams/pretraining/")
    page.click("#webhooks-link")
    page.wait_for_url(lead.server + "/groups/pretraining/webhooks/")
    page.fill("#id_name", "pretraining-alerts")
    page.fill("#id_url", receiver.url())
    page.select_option("#id_format", "teams")
    page.uncheck("input[name=kinds][value=budget_alert]")
    page.uncheck("input[name=kinds][value=change_request]")
    page.click("#webhook-form button[type=submit]")
    page.wait_for_url(lead.server + "/groups/pretraining/webhooks/")
    assert "Webhook pretraining-alerts added" in page.inner_text("main")
    assert "preemption, idle_stop" in page.inner_text("#webhooks")
    page.click("#webhooks button:text('Send a test message')")
    page.wait_for_url(lead.server + "/groups/pretraining/webhooks/")
    assert "Test message to pretraining-alerts sent" in page.inner_text("main")
    assert "Delivered" in page.inner_text("#deliveries")
    (request,) = receiver.requests
    assert request["body"]["attachments"][0]["contentType"] == "application/vnd.microsoft.card.adaptive"
    assert lead.errors == []
