"""Multi-node tasks through the client against a live server: ``klique submit --nodes N``, the SDK's
``nodes`` and the MCP tool's send the task's nodes (left out: 1), show "nodes x GPUs", and bring
back the server's reasons on the ``nodes`` field."""

import json
from decimal import Decimal

import anyio
import pytest
from mcp import Client as McpClient
from mcp.client.stdio import StdioServerParameters

from apps.pools.models import Pool
from apps.tasks.models import Schedule, Task
from klique.client import Client, InvalidRequest
from tests.channels.conftest import token_for
from tests.channels.live import KLIQUE, klique, logged_in

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env(live_server, estate, tmp_path):
    """A CLI logged in as the member vera."""
    return logged_in(tmp_path, live_server.url, token_for(estate.member))


@pytest.fixture
def sdk(live_server, estate):
    with Client(live_server.url, token_for(estate.member)) as client:
        yield client


def test_klique_submit_sends_its_nodes_and_shows_nodes_times_gpus(env):
    submitted = klique(
        env, "submit", "vision/a100-any", "--gpus", "2", "--nodes", "2", "--", "torchrun", "t.py"
    )
    assert submitted.returncode == 0, submitted.stderr
    assert "to vision/a100-any (2 x 2 GPUs): queued at position 1" in submitted.stdout
    task = Task.objects.get()
    assert (task.gpus, task.nodes, task.channel) == (2, 2, "cli")
    listed = klique(env, "ls").stdout.splitlines()
    assert listed[1].split()[:4] == [str(task.pk), "queued", "vision/a100-any", "2"]
    assert "2 x 2" in listed[1]
    status = klique(env, "status", str(task.pk)).stdout
    assert "GPUs              2 x 2 (4 counted: GPUs per node x nodes)" in status
    assert json.loads(klique(env, "status", str(task.pk), "--json").stdout)["nodes"] == 2


def test_klique_submit_without_nodes_runs_on_one_node(env):
    submitted = klique(env, "submit", "vision/a100-any", "--gpus", "2", "--json", "--", "train")
    assert submitted.returncode == 0, submitted.stderr
    assert json.loads(submitted.stdout)["nodes"] == 1 and Task.objects.get().nodes == 1
    assert "GPUs              2\n" in klique(env, "status", str(Task.objects.get().pk)).stdout


@pytest.mark.parametrize(
    "args, reason",
    [
        (
            ["vision/a100-any", "--gpus", "2", "--nodes", "65"],
            "nodes: Ensure this value is less than or equal to 64.",
        ),
        (
            ["vision/a100-any", "--gpus", "2", "--nodes", "0"],
            "nodes: Ensure this value is greater than or equal to 1.",
        ),
        (
            ["vision/a100-any", "--gpus", "2", "--nodes", "3"],
            "nodes: GPUs x nodes (2 x 3 = 6) exceed the limit",
        ),
    ],
)
def test_klique_submit_with_refused_nodes_exits_5_naming_the_field(env, args, reason):
    result = klique(env, "submit", *args, "--", "train")
    assert result.returncode == 5 and reason in result.stderr
    assert not Task.objects.exists()


def test_klique_submit_refuses_nodes_that_are_not_a_plain_whole_number(env):
    result = klique(env, "submit", "vision/a100-any", "--nodes", "1_0", "--", "train")
    assert result.returncode == 2 and "'1_0' is not a whole number" in result.stderr
    assert not Task.objects.exists()


def test_a_schedule_added_with_nodes_submits_on_that_many_nodes(env):
    added = klique(
        env,
        "schedule",
        "add",
        "vision/a100",
        "--cron",
        "0 2 * * *",
        "--name",
        "n",
        "--nodes",
        "4",
        "--json",
        "--",
        "x",
    )
    assert added.returncode == 0, added.stderr
    assert json.loads(added.stdout)["nodes"] == 4 and Schedule.objects.get().nodes == 4


def test_the_sdk_sends_nodes_and_reads_them_back(sdk):
    task = sdk.submit("vision/a100-any", "torchrun train.py", gpus="2", nodes=2)
    assert (task.nodes, task.gpus, task.counted_gpus) == (2, Decimal(2), Decimal(4))
    assert Task.objects.get(pk=task.id).nodes == 2 and sdk.task(task.id).nodes == 2
    single = sdk.submit("vision/a100", "train")
    assert single.nodes == 1 and single.counted_gpus == 1 and Task.objects.get(pk=single.id).nodes == 1
    schedule = sdk.create_schedule("vision/a100", "x", cron="0 2 * * *", name="n", nodes=3)
    assert schedule.nodes == 3 and sdk.schedule(schedule.id).nodes == 3


def test_the_sdk_raises_the_servers_reason_on_nodes_for_a_pool_without_multi_node_work(sdk, estate):
    Pool.objects.filter(pk=estate.pool.pk).update(multi_node=False)
    with pytest.raises(InvalidRequest) as refused:
        sdk.submit("vision/a100", "train", nodes=2)
    assert refused.value.status == 400
    assert refused.value.errors["nodes"] == [
        f"Profile a100 has pools that run no multi-node work ({estate.pool.name}), "
        "so a task there runs on one node."
    ]
    assert not Task.objects.exists()


def test_an_agent_submits_a_multi_node_task_and_refused_nodes_come_back_as_a_tool_error(live_server, estate):
    server = StdioServerParameters(
        command=KLIQUE,
        args=["mcp"],
        env={"KLIQUE_URL": live_server.url, "KLIQUE_TOKEN": token_for(estate.member)},
    )
    submit = {"compute_resource": "vision/a100-any", "command": "torchrun t.py", "gpus": "2"}

    async def session():
        async with McpClient(server, read_timeout_seconds=30) as client:
            tools = await client.list_tools()
            return (
                next(t for t in tools.tools if t.name == "submit_task"),
                await client.call_tool("submit_task", submit | {"nodes": 2}),
                await client.call_tool("submit_task", submit | {"nodes": 3}),
                await client.call_tool("submit_task", submit | {"nodes": 0}),
            )

    tool, submitted, over_limit, zero = anyio.run(session)
    assert tool.input_schema["properties"]["nodes"]["anyOf"][0] == {"type": "integer", "minimum": 1}
    assert not submitted.is_error
    body = submitted.structured_content or json.loads(submitted.content[0].text)
    assert (body["nodes"], body["gpus"]) == (2, "2.000")
    assert Task.objects.get().channel == "mcp"
    assert (
        over_limit.is_error and "Refused (400): gpus: GPUs x nodes (2 x 3 = 6)" in over_limit.content[0].text
    )
    assert zero.is_error and "nodes" in zero.content[0].text
    assert Task.objects.count() == 1
