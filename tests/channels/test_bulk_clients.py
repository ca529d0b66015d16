"""Bulk submission through the clients against a live server: the SDK's ``submit_many`` and
``klique submit --from FILE`` (a JSON array or JSON lines, ``-`` for standard input, in batches),
with refusals naming the item's index and field."""

import json

import httpx
import pytest

from apps.tasks.models import Task
from klique.client import Client, InvalidRequest
from klique.client.sdk.errors import BulkUnsupported
from tests.channels.conftest import token_for
from tests.channels.live import klique, logged_in

pytestmark = pytest.mark.django_db(transaction=True)


def item(resource="vision/a100", command="train.py", **fields):
    return {"compute_resource": resource, "command": command, **fields}


@pytest.fixture
def sdk(live_server, estate):
    with Client(live_server.url, token_for(estate.member)) as client:
        yield client


@pytest.fixture
def env(live_server, estate, tmp_path):
    return logged_in(tmp_path, live_server.url, token_for(estate.member))


def test_submit_many_returns_typed_tasks_in_order_on_the_sdk_channel(sdk):
    from decimal import Decimal

    tasks = sdk.submit_many(
        [
            item(name="a"),
            item("vision/a100-any", ["python", "train.py", "--name", "a b"], gpus=Decimal("2"), name="b"),
        ]
    )
    assert [t.name for t in tasks] == ["a", "b"] and tasks[0].id < tasks[1].id
    assert tasks[1].gpus == 2 and isinstance(tasks[1].gpus, Decimal)
    stored = Task.objects.get(pk=tasks[1].id)
    assert stored.channel == "sdk" and stored.command == "python train.py --name 'a b'"


def test_submit_many_refusal_names_the_index_and_field_and_creates_nothing(sdk):
    with pytest.raises(InvalidRequest) as refused:
        sdk.submit_many([item(), item(gpus="3")])
    assert list(refused.value.errors) == ["tasks.1.gpus"]
    assert "fixed size" in refused.value.message
    assert not Task.objects.exists()


def test_submit_many_on_a_server_without_the_endpoint_raises_a_clear_error():
    """An older server answers 404: no fallback to one submit per task."""
    seen = []

    def older_server(request):
        seen.append(request.url.path)
        return httpx.Response(404, json={"detail": "Not found."})

    with Client("http://old.example", "kqp_x", transport=httpx.MockTransport(older_server)) as client:
        with pytest.raises(BulkUnsupported, match="no bulk submission"):
            client.submit_many([item()])
    assert seen == ["/api/v1/tasks/bulk/"]


def test_cli_submits_a_json_array_file_and_prints_the_ids(env, tmp_path):
    path = tmp_path / "tasks.json"
    path.write_text(json.dumps([item(name=f"t{i}") for i in range(3)]))
    result = klique(env, "submit", "--from", str(path))
    assert result.returncode == 0, result.stderr
    ids = [int(line) for line in result.stdout.split()]
    assert [Task.objects.get(pk=i).name for i in ids] == ["t0", "t1", "t2"]
    assert set(Task.objects.values_list("channel", flat=True)) == {"cli"}


def test_cli_reads_json_lines_from_stdin_in_batches(env):
    lines = "\n".join(json.dumps(item(name=f"t{i}")) for i in range(5)) + "\n\n"
    result = klique(env, "submit", "--from", "-", "--batch", "2", "--json", stdin=lines)
    assert result.returncode == 0, result.stderr
    names = [t["name"] for t in json.loads(result.stdout)]
    assert names == [f"t{i}" for i in range(5)]
    assert list(Task.objects.order_by("pk").values_list("name", flat=True)) == names


def test_cli_refused_item_exits_5_naming_its_index_in_the_file_and_field(env):
    """The second batch is refused: its item 1 is item 3 of the file. The first batch stays."""
    items = [item(), item(), item(), item(gpus="3")]
    result = klique(env, "submit", "--from", "-", "--batch", "2", stdin=json.dumps(items))
    assert result.returncode == 5
    assert "item 3: gpus:" in result.stderr and "fixed size" in result.stderr
    assert "2 tasks submitted before" in result.stderr
    assert Task.objects.count() == 2 and len(result.stdout.split()) == 2


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ('[{"command": "x"}, 3]', "item 1: a task is a JSON object, not int"),
        ('{"command": "x"}\n{oops\n', "item 1 (line 2): not JSON"),
        ("[1, ", "is not a JSON array"),
        ("", "holds no tasks"),
    ],
)
def test_cli_bad_file_exits_5_naming_the_item(env, text, said):
    result = klique(env, "submit", "--from", "-", stdin=text)
    assert result.returncode == 5 and said in result.stderr
    assert not Task.objects.exists()


def test_cli_from_file_takes_no_task_fields_on_the_command_line(env, tmp_path):
    result = klique(env, "submit", "--from", "-", "vision/a100", stdin="[]")
    assert result.returncode == 2 and "give no RESOURCE" in result.stderr
