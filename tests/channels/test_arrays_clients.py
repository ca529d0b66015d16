"""Rule 5 (arrays) through the clients against a live server: ``klique submit --array N
--max-running M``, the SDK's ``submit_array`` and the MCP tool's ``array`` and ``max_running``;
``klique status`` shows a task's array and index."""

import json

import pytest

from apps.tasks.models import Task, TaskArray
from klique.client import Client, InvalidRequest
from tests.channels.conftest import token_for
from tests.channels.live import klique, logged_in
from tests.channels.test_mcp import body, talk

pytestmark = pytest.mark.django_db(transaction=True)


def test_arrays_cli_submit_array_with_a_cap_and_status_shows_the_index(live_server, estate, tmp_path):
    env = logged_in(tmp_path, live_server.url, token_for(estate.member))
    result = klique(
        env, "submit", "vision/a100", "--array", "3", "--max-running", "2", "--time", "10m", "--", "t"
    )
    assert result.returncode == 0, result.stderr
    array = TaskArray.objects.get()
    ids = list(Task.objects.order_by("pk").values_list("pk", flat=True))
    assert result.stdout.strip() == (
        f"Submitted array {array.pk} (tasks {ids[0]} to {ids[-1]}, at most 2 at once) to vision/a100."
    )
    assert (array.size, array.max_running) == (3, 2)
    assert {t.time_limit_s for t in Task.objects.all()} == {600}
    status = klique(env, "status", str(ids[2]))
    assert f"array             {array.pk}, index 2 (KLIQUE_ARRAY_INDEX)" in status.stdout
    as_json = klique(env, "submit", "vision/a100", "--array", "2", "--json", "--", "t")
    assert [t["array_index"] for t in json.loads(as_json.stdout)["tasks"]] == [0, 1]
    assert klique(env, "submit", "vision/a100", "--max-running", "2", "--", "t").returncode == 2
    assert klique(env, "submit", "vision/a100", "--array", "2", "--wait", "--", "t").returncode == 2
    too_many = klique(env, "submit", "vision/a100", "--array", "1001", "--", "t")
    assert too_many.returncode == 5 and "array:" in too_many.stderr


def test_arrays_sdk_submit_array(live_server, estate):
    with Client(live_server.url, token_for(estate.member)) as sdk:
        array = sdk.submit_array("vision/a100", ["python", "shard.py"], size=4, max_running=1, name="shards")
        assert array.size == 4 and array.max_running == 1 and len(array.task_ids) == 4
        assert [t.array_index for t in array.tasks] == [0, 1, 2, 3]
        assert {t.array for t in array.tasks} == {array.id}
        assert sdk.task(array.task_ids[3]).array_index == 3
        with pytest.raises(InvalidRequest) as refused:
            sdk.submit_array("vision/a100", "t", size=0)
        assert list(refused.value.errors) == ["array"]


def test_arrays_the_mcp_tool_takes_array_and_max_running(live_server, estate):
    async def calls(client):
        array = await client.call_tool(
            "submit_task", {"compute_resource": "vision/a100", "command": "t", "array": 2, "max_running": 1}
        )
        uncapped = await client.call_tool(
            "submit_task", {"compute_resource": "vision/a100", "command": "t", "max_running": 1}
        )
        return body(array), uncapped

    array, uncapped = talk(live_server, token_for(estate.member), calls)
    assert array["size"] == 2 and array["max_running"] == 1 and len(array["tasks"]) == 2
    assert uncapped.is_error and "max_running caps an array" in uncapped.content[0].text
