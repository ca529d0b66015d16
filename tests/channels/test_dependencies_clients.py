"""Rule 2 (dependencies) through the clients against a live server: ``klique submit --after-ok``
and ``--after-any`` with ``klique status`` showing the links and their states, the SDK's
``submit(after_ok=...)`` and ``submit_pipeline`` (steps naming earlier steps, one bulk request,
the tasks by step name, a refused step named by its name), and the MCP tool's fields."""

import json

import pytest

from apps.tasks.models import Task, TaskDependency
from klique.client import Client, InvalidRequest, PipelineError
from klique.client.sdk.pipelines import pipeline_items
from tests.channels.conftest import token_for
from tests.channels.live import klique, logged_in
from tests.channels.test_mcp import body, talk


def test_dependencies_a_pipelines_steps_become_bulk_items_naming_earlier_items():
    names, items = pipeline_items(
        [
            {"name": "prep", "compute_resource": "r", "command": ["python", "prep.py"]},
            {"name": "train", "compute_resource": "r", "command": "t", "after_ok": ["prep", 7]},
            {"name": "report", "compute_resource": "r", "command": "x", "after_any": ["prep", "train"]},
        ]
    )
    assert names == ["prep", "train", "report"]
    assert items[0]["command"] == "python prep.py" and "after_ok" not in items[0]
    assert items[1]["after_ok"] == [{"item": 0}, 7]
    assert items[2]["after_any"] == [{"item": 0}, {"item": 1}]


@pytest.mark.parametrize(
    ("steps", "words"),
    [
        ([{"compute_resource": "r", "command": "c"}], "Step 0 has no name"),
        ([{"name": "a", "command": "c"}, {"name": "a", "command": "c"}], "'a' is given twice"),
        ([{"name": "a", "command": "c", "after_ok": ["b"]}, {"name": "b", "command": "c"}], "names 'b'"),
        ([{"name": "a", "command": "c", "after_any": ["a"]}], "names 'a'"),
    ],
)
def test_dependencies_a_pipeline_the_sdk_cannot_send_raises_before_any_request(steps, words):
    with pytest.raises(PipelineError, match=words):
        pipeline_items(steps)


@pytest.mark.django_db(transaction=True)
def test_dependencies_cli_submit_after_ok_and_after_any_and_status_shows_the_links(
    live_server, estate, tmp_path
):
    env = logged_in(tmp_path, live_server.url, token_for(estate.member))
    first = json.loads(klique(env, "submit", "vision/a100", "--json", "--", "prep").stdout)["id"]
    second = json.loads(klique(env, "submit", "vision/a100", "--json", "--", "prep2").stdout)["id"]
    result = klique(
        env,
        "submit",
        "vision/a100",
        "--after-ok",
        f"{first},{second}",
        "--after-any",
        str(first),
        "--json",
        "--",
        "train",
    )
    assert result.returncode == 5 and "after_any: Task" in result.stderr and "named twice" in result.stderr
    result = klique(
        env,
        "submit",
        "vision/a100",
        "--after-ok",
        str(first),
        "--after-any",
        str(second),
        "--json",
        "--",
        "t",
    )
    assert result.returncode == 0, result.stderr
    task = json.loads(result.stdout)
    assert task["after_ok"] == [first] and task["after_any"] == [second]
    status = klique(env, "status", str(task["id"]))
    assert f"runs after        task {first} (queued), if it succeeds" in status.stdout
    assert f"task {second} (queued), whatever its end" in status.stdout
    upstream = klique(env, "status", str(first))
    assert f"runs before       task {task['id']} (queued), if this succeeds" in upstream.stdout
    unknown = klique(env, "submit", "vision/a100", "--after-ok", "999999", "--", "t")
    assert unknown.returncode == 5 and "after_ok: Task 999999 is unknown (or not yours)." in unknown.stderr
    bad = klique(env, "submit", "vision/a100", "--after-ok", "12,x", "--", "t")
    assert bad.returncode == 2 and "is not a list of task ids" in bad.stderr


@pytest.mark.django_db(transaction=True)
def test_dependencies_canceled_for_a_failed_dependency_reads_so_in_status(live_server, estate, tmp_path):
    env = logged_in(tmp_path, live_server.url, token_for(estate.member))
    first = json.loads(klique(env, "submit", "vision/a100", "--json", "--", "prep").stdout)["id"]
    after = json.loads(
        klique(env, "submit", "vision/a100", "--after-ok", str(first), "--json", "--", "t").stdout
    )
    Task.objects.filter(pk=after["id"]).update(
        state=Task.State.CANCELED, stop_reason=Task.StopReason.DEPENDENCY_FAILED
    )
    status = klique(env, "status", str(after["id"]))
    assert f"task {after['id']}: canceled: a task it runs after did not succeed" in status.stdout


@pytest.mark.django_db(transaction=True)
def test_dependencies_sdk_submit_and_submit_pipeline_in_one_request(live_server, estate):
    with Client(live_server.url, token_for(estate.member)) as sdk:
        first = sdk.submit("vision/a100", "prep")
        after = sdk.submit("vision/a100", "train", after_ok=[first.id])
        assert after.after_ok == (first.id,) and after.dependencies[0].task == first.id
        assert sdk.task(first.id).dependants[0].task == after.id
        steps = [
            {"name": "prep", "compute_resource": "vision/a100", "command": "prep"},
            {"name": "train", "compute_resource": "vision/a100", "command": "train", "after_ok": ["prep"]},
            {
                "name": "report",
                "compute_resource": "vision/a100",
                "command": "report",
                "after_any": ["train", first.id],
                "time_limit_s": 600,
            },
        ]
        tasks = sdk.submit_pipeline(steps)
        assert list(tasks) == ["prep", "train", "report"]
        assert tasks["train"].after_ok == (tasks["prep"].id,)
        assert tasks["report"].after_any == (first.id, tasks["train"].id)  # by id
        assert tasks["report"].name == "report" and tasks["report"].time_limit_s == 600
        assert TaskDependency.objects.filter(task_id=tasks["report"].id).count() == 2
        with pytest.raises(InvalidRequest) as refused:
            sdk.submit_pipeline(
                [
                    {"name": "a", "compute_resource": "vision/a100", "command": "a"},
                    {"name": "b", "compute_resource": "vision/a100", "command": "b", "after_ok": [999999]},
                ]
            )
        assert list(refused.value.errors) == ["steps.b.after_ok"]
        assert Task.objects.count() == 5


@pytest.mark.django_db(transaction=True)
def test_dependencies_the_mcp_tool_takes_after_ok_and_after_any(live_server, estate):
    async def calls(client):
        first = await client.call_tool("submit_task", {"compute_resource": "vision/a100", "command": "prep"})
        after = await client.call_tool(
            "submit_task",
            {
                "compute_resource": "vision/a100",
                "command": "train",
                "after_ok": [body(first)["id"]],
                "after_any": [],
            },
        )
        unknown = await client.call_tool(
            "submit_task", {"compute_resource": "vision/a100", "command": "t", "after_ok": [999999]}
        )
        return body(first), body(after), unknown

    first, after, unknown = talk(live_server, token_for(estate.member), calls)
    assert after["after_ok"] == [first["id"]] and after["dependencies"][0]["state"] == "queued"
    assert unknown.is_error and "after_ok: Task 999999 is unknown" in unknown.content[0].text
