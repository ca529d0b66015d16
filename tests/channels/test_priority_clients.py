"""A task's priority through the clients against a live server: ``klique submit --priority`` (a
whole number or a class's name), the SDK's ``submit`` and ``submit_many``, and the MCP tool; a
refusal names ``priority`` and the reason (CLI exit 5, SDK ``InvalidRequest``, MCP tool error)."""

import json

import pytest

from apps.policies.models import PriorityClass
from apps.tasks.models import Task
from klique.client import Client, InvalidRequest
from tests.channels.conftest import token_for
from tests.channels.live import klique, logged_in
from tests.channels.test_mcp import body, talk

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def capped(estate):
    """vision/a100: default 100, maximum 200 (high). A transactional test flushed the migration's
    classes, so they are made here."""
    for name, value in (("low", 0), ("normal", 100), ("high", 200)):
        PriorityClass.objects.update_or_create(name=name, defaults={"value": value})
    resource = estate.vision_a100
    resource.default_priority, resource.max_priority = 100, 200
    resource.save()
    return estate


def test_cli_submit_takes_a_class_name_or_a_number_and_refuses_above_the_maximum(
    live_server, capped, tmp_path
):
    env = logged_in(tmp_path, live_server.url, token_for(capped.member))
    named = klique(env, "submit", "vision/a100", "--priority", "high", "--json", "--", "train")
    numbered = klique(env, "submit", "vision/a100", "--priority", "-7", "--json", "--", "train")
    default = klique(env, "submit", "vision/a100", "--json", "--", "train")
    assert named.returncode == numbered.returncode == default.returncode == 0, named.stderr
    got = [json.loads(r.stdout)["priority"] for r in (named, numbered, default)]
    assert got == [200, -7, 100]
    assert [t.channel for t in Task.objects.order_by("pk")] == ["cli"] * 3
    above = klique(env, "submit", "vision/a100", "--priority", "300", "--", "train")
    assert above.returncode == 5
    assert "priority: Priority 300 is above the maximum: at most 200 (high) on vision/a100." in above.stderr
    unknown = klique(env, "submit", "vision/a100", "--priority", "urgent", "--", "train")
    assert unknown.returncode == 5 and "priority: Unknown priority class 'urgent'" in unknown.stderr
    assert Task.objects.count() == 3


def test_sdk_submit_and_submit_many_carry_priority_and_read_it_back(live_server, capped):
    with Client(live_server.url, token_for(capped.member)) as sdk:
        task = sdk.submit("vision/a100", "train", priority="normal")
        assert task.priority == 100 and sdk.task(task.id).priority == 100
        many = sdk.submit_many(
            [
                {"compute_resource": "vision/a100", "command": "a", "priority": 5},
                {"compute_resource": "vision/a100", "command": "b"},
            ]
        )
        assert [t.priority for t in many] == [5, 100]
        with pytest.raises(InvalidRequest) as refused:
            sdk.submit("vision/a100", "train", priority=201)
    assert list(refused.value.errors) == ["priority"]


def test_the_mcp_tool_submits_with_a_priority_and_returns_a_refusal_naming_it(live_server, capped):
    async def calls(client):
        return [
            await client.call_tool(
                "submit_task", {"compute_resource": "vision/a100", "command": "x", "priority": "high"}
            ),
            await client.call_tool(
                "submit_task", {"compute_resource": "vision/a100", "command": "x", "priority": 250}
            ),
            await client.call_tool(
                "submit_task", {"compute_resource": "vision/a100", "command": "x", "priority": True}
            ),
        ]

    submitted, above, boolean = talk(live_server, token_for(capped.member), calls)
    assert not submitted.is_error and body(submitted)["priority"] == 200
    assert (
        above.is_error
        and "Refused (400): priority: Priority 250 is above the maximum" in above.content[0].text
    )
    assert boolean.is_error and "priority" in boolean.content[0].text
    assert [(t.priority, t.channel) for t in Task.objects.all()] == [(200, "mcp")]
