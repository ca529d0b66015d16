"""``klique mcp`` started over stdio by the real client of the ``mcp`` package: it lists its tools,
submits and reads back a task as the token's user, and returns refusals as tool errors."""

import json
import subprocess

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from apps.tasks.models import Task
from tests.channels.conftest import token_for
from tests.channels.live import KLIQUE

pytestmark = pytest.mark.django_db(transaction=True)


def talk(live_server, token, calls):
    """Start ``klique mcp`` and run ``calls(client)`` against it; returns what it returns."""
    server = StdioServerParameters(
        command=KLIQUE, args=["mcp"], env={"KLIQUE_URL": live_server.url, "KLIQUE_TOKEN": token}
    )

    async def session():
        async with Client(server, read_timeout_seconds=30) as client:
            return await calls(client)

    return anyio.run(session)


def body(result):
    return (
        result.structured_content
        if result.structured_content is not None
        else json.loads(result.content[0].text)
    )


def test_an_agent_lists_tools_submits_and_reads_back_a_task_as_the_user(live_server, estate):
    async def calls(client):
        tools = await client.list_tools()
        resources = await client.call_tool("list_compute_resources", {})
        submitted = await client.call_tool(
            "submit_task", {"compute_resource": "vision/a100-any", "command": "python train.py", "gpus": "2"}
        )
        task_id = body(submitted)["id"]
        read = await client.call_tool("get_task", {"task_id": task_id})
        listed = await client.call_tool("list_tasks", {"state": "queued"})
        usage = await client.call_tool("my_usage_and_budgets", {})
        canceled = await client.call_tool("cancel_task", {"task_id": task_id})
        return tools, resources, submitted, read, listed, usage, canceled

    tools, resources, submitted, read, listed, usage, canceled = talk(
        live_server, token_for(estate.member), calls
    )
    assert {t.name for t in tools.tools} == {
        "list_compute_resources",
        "submit_task",
        "get_task",
        "list_tasks",
        "cancel_task",
        "my_usage_and_budgets",
        "list_session_kinds",
        "start_session",
        "get_session",
        "list_sessions",
        "stop_session",
        "list_maintenance_windows",
        "list_loans",
    }
    assert not submitted.is_error
    assert {r["name"] for r in body(resources)["compute_resources"]} == {
        "vision/a100",
        "vision/a100-any",
        "vision/a100-quarter",
    }
    task = body(read)
    assert task["state"] == "queued" and task["queue_position"] == 1 and task["gpus"] == "2.000"
    assert task["verdict"] is None and task["preemptions"] == []
    stored = Task.objects.get(pk=task["id"])
    assert (stored.user, stored.channel) == (estate.member, "mcp")
    assert [t["id"] for t in body(listed)["tasks"]] == [task["id"]]
    assert body(usage)["groups"][0]["group"] == "vision"
    assert body(canceled)["state"] == "canceled"


def test_refusals_and_bad_inputs_come_back_as_tool_errors_with_the_reason(live_server, estate):
    async def calls(client):
        return [
            await client.call_tool(
                "submit_task", {"compute_resource": "vision/a100", "command": "x", "gpus": "3"}
            ),
            await client.call_tool("submit_task", {"compute_resource": "speech/a100", "command": "x"}),
            await client.call_tool(
                "submit_task", {"compute_resource": "vision/a100", "command": "x", "gpus": "lots"}
            ),
            await client.call_tool("get_task", {"task_id": 0}),
            await client.call_tool("get_task", {"task_id": 999999}),
        ]

    fixed, unknown, malformed, invalid_id, missing = talk(live_server, token_for(estate.member), calls)
    assert all(r.is_error for r in (fixed, unknown, malformed, invalid_id, missing))
    assert "Refused (400): gpus:" in fixed.content[0].text and "fixed size" in fixed.content[0].text
    assert "compute_resource: Unknown compute resource 'speech/a100'" in unknown.content[0].text
    assert "gpus" in malformed.content[0].text
    assert "task_id" in invalid_id.content[0].text
    assert "Refused (404)" in missing.content[0].text
    assert not Task.objects.exists()


def test_an_agent_without_a_token_cannot_start(tmp_path):
    env = {"KLIQUE_CONFIG": str(tmp_path / "none.json"), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [KLIQUE, "mcp"], env=env, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 3 and "klique login" in result.stderr
