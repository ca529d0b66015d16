"""The JSON body of each webhook format; pure functions of one event."""

from datetime import UTC, datetime

KIND_WORDS = {
    "budget_alert": "Budget alert",
    "preemption": "Preemption",
    "idle_stop": "Idle stop",
    "change_request": "Change request",
    "test": "Test message",
}


def slack(kind: str, title: str, text: str, link: str, group: str, at: datetime) -> dict:
    """A Slack incoming-webhook message: ``text`` is the notification fallback, ``blocks`` the layout."""
    blocks: list[dict] = [
        {"type": "header", "text": {"type": "plain_text", "text": title[:150], "emoji": False}},
        {"type": "section", "text": {"type": "mrkdwn", "text": text[:3000]}},
        {
            "type": "context",
            "elements": [{"type": "mrkdwn", "text": f"{KIND_WORDS.get(kind, kind)} · {group} · {_iso(at)}"}],
        },
    ]
    if link:
        blocks.append(
            {
                "type": "actions",
                "elements": [
                    {"type": "button", "text": {"type": "plain_text", "text": "Open in Klique"}, "url": link}
                ],
            }
        )
    return {"text": f"{title}: {text}", "blocks": blocks}


def teams(kind: str, title: str, text: str, link: str, group: str, at: datetime) -> dict:
    """A Microsoft Teams message carrying one Adaptive Card (Workflows and incoming webhooks)."""
    card: dict = {
        "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
        "type": "AdaptiveCard",
        "version": "1.4",
        "body": [
            {"type": "TextBlock", "text": title, "weight": "Bolder", "size": "Medium", "wrap": True},
            {"type": "TextBlock", "text": text, "wrap": True},
            {
                "type": "FactSet",
                "facts": [
                    {"title": "Event", "value": KIND_WORDS.get(kind, kind)},
                    {"title": "Group", "value": group},
                    {"title": "At", "value": _iso(at)},
                ],
            },
        ],
    }
    if link:
        card["actions"] = [{"type": "Action.OpenUrl", "title": "Open in Klique", "url": link}]
    return {
        "type": "message",
        "attachments": [
            {"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}
        ],
    }


def generic(kind: str, title: str, text: str, link: str, group: str, at: datetime) -> dict:
    return {"kind": kind, "title": title, "text": text, "link": link, "group": group, "at": _iso(at)}


BUILDERS = {"slack": slack, "teams": teams, "generic": generic}


def build(format: str, kind: str, title: str, text: str, link: str, group: str, at: datetime) -> dict:
    return BUILDERS[format](kind, title, text, link, group, at)


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat()
