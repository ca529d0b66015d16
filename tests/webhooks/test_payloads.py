"""The JSON body of each format: Slack incoming-webhook blocks, a Teams message carrying an
Adaptive Card, and the generic event; and each as a real receiver gets it."""

from datetime import UTC, datetime

import pytest

from apps.webhooks import payloads, services
from apps.webhooks.models import Webhook
from tests.factories import GroupFactory

AT = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
EVENT = (
    "preemption",
    "2 tasks of Detection preempted",
    "• Task 1 …\n• Task 2 …",
    "https://k.example/work/tasks/1/",
)


def test_slack_has_a_fallback_text_and_header_section_context_and_button_blocks():
    body = payloads.slack(*EVENT, "Detection", AT)
    assert body["text"] == "2 tasks of Detection preempted: • Task 1 …\n• Task 2 …"
    assert [block["type"] for block in body["blocks"]] == ["header", "section", "context", "actions"]
    assert body["blocks"][0]["text"] == {"type": "plain_text", "text": EVENT[1], "emoji": False}
    assert body["blocks"][1]["text"] == {"type": "mrkdwn", "text": EVENT[2]}
    assert body["blocks"][2]["elements"][0]["text"] == "Preemption · Detection · 2026-05-04T08:00:00+00:00"
    assert body["blocks"][3]["elements"][0]["url"] == EVENT[3]


def test_slack_without_a_link_has_no_button():
    body = payloads.slack("budget_alert", "t", "x", "", "Detection", AT)
    assert [block["type"] for block in body["blocks"]] == ["header", "section", "context"]


def test_teams_is_a_message_with_one_adaptive_card():
    body = payloads.teams(*EVENT, "Detection", AT)
    assert body["type"] == "message"
    (attachment,) = body["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert card["type"] == "AdaptiveCard" and card["version"] == "1.4"
    assert card["$schema"] == "http://adaptivecards.io/schemas/adaptive-card.json"
    title, text, facts = card["body"]
    assert (title["type"], title["text"], title["weight"]) == ("TextBlock", EVENT[1], "Bolder")
    assert (text["type"], text["text"], text["wrap"]) == ("TextBlock", EVENT[2], True)
    assert facts["type"] == "FactSet"
    assert {f["title"]: f["value"] for f in facts["facts"]} == {
        "Event": "Preemption",
        "Group": "Detection",
        "At": "2026-05-04T08:00:00+00:00",
    }
    assert card["actions"] == [{"type": "Action.OpenUrl", "title": "Open in Klique", "url": EVENT[3]}]


def test_generic_is_the_event_itself():
    assert payloads.generic(*EVENT, "Detection", AT) == {
        "kind": "preemption",
        "title": EVENT[1],
        "text": EVENT[2],
        "link": EVENT[3],
        "group": "Detection",
        "at": "2026-05-04T08:00:00+00:00",
    }


@pytest.mark.django_db
@pytest.mark.parametrize("format", ["slack", "teams", "generic"])
def test_each_format_reaches_a_receiver_as_json(receiver, format, django_capture_on_commit_callbacks):
    team = GroupFactory(name="Detection")
    Webhook.objects.create(group=team, url=receiver.url(), format=format)
    with django_capture_on_commit_callbacks(execute=True):
        services.enqueue_for(team, "idle_stop", "Session stopped", "It was idle.", "/work/tasks/3/")
    (request,) = receiver.requests
    assert request["headers"]["Content-Type"] == "application/json"
    expected = {"slack": "blocks", "teams": "attachments", "generic": "kind"}[format]
    assert expected in request["body"]
