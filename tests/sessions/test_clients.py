"""Sessions through the clients against a live server on a real port: ``klique session
start|ls|open|stop``, the SDK and the MCP tools, each as the token's user."""

import json

import pytest
from django.utils import timezone

from apps.sessions.selectors import session_token
from apps.tasks.models import Task
from klique.client import Client, InvalidRequest, NotFound
from tests.channels.conftest import token_for
from tests.channels.live import cli_env, klique
from tests.channels.test_mcp import body, talk
from tests.sessions.conftest import sample

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env(live_server, estate, tmp_path):
    env = cli_env(tmp_path)
    login = klique(
        env, "login", "--url", live_server.url, "--token", "-", stdin=token_for(estate.member) + "\n"
    )
    assert login.returncode == 0, login.stderr
    return env


def make_ready(worker, running, task_id) -> str:
    task = running(Task.objects.get(pk=task_id))
    url = f"http://gpu-1:41000/sessions/{task.pk}/"
    answer = worker.heartbeat([task.pk], {str(task.pk): sample(timezone.now(), url=url, ready=True)})
    assert answer.status_code == 200
    return url


def test_the_cli_starts_lists_opens_and_stops_a_session(env, estate, jupyter, worker, running):
    started = klique(env, "session", "start", "vision/a100", "--kind", "JupyterLab", "--json")
    assert started.returncode == 0, started.stderr
    task_id = json.loads(started.stdout)["id"]
    assert Task.objects.get(pk=task_id).channel == "cli"
    not_ready = klique(env, "session", "open", str(task_id))
    assert not_ready.returncode == 1 and "not ready: queued" in not_ready.stderr
    url = make_ready(worker, running, task_id)
    listed = klique(env, "session", "ls")
    assert listed.returncode == 0 and f"{task_id}" in listed.stdout and "ready" in listed.stdout
    assert url in listed.stdout
    opened = klique(env, "session", "open", str(task_id))
    assert opened.returncode == 0, opened.stderr
    token = session_token(task_id)
    assert f"URL    {url}" in opened.stdout and f"Token  {token}" in opened.stdout
    assert f"Open   {url}?token={token}" in opened.stdout
    stopped = klique(env, "session", "stop", str(task_id))
    assert stopped.returncode == 0 and "stop requested" in stopped.stdout
    assert Task.objects.get(pk=task_id).stop_reason == "canceled"


def test_the_cli_refuses_an_unknown_kind_naming_the_field(env, jupyter):
    refused = klique(env, "session", "start", "vision/a100", "--kind", "nope")
    assert refused.returncode == 5 and "session_kind: Unknown session kind 'nope'" in refused.stderr


def test_the_sdk_starts_reads_and_stops_a_session(live_server, estate, jupyter, ide, worker, running):
    with Client(live_server.url, token_for(estate.member)) as sdk:
        assert {k.name for k in sdk.session_kinds()} == {"code-server", "JupyterLab"}
        task = sdk.start_session("vision/a100", kind="code-server", name="ide")
        assert task.kind == "session" and task.session.kind == "code-server" and not task.session.ready
        url = make_ready(worker, running, task.id)
        read = sdk.session(task.id)
        assert read.session.ready and read.session.url == url
        assert read.session.open_url == f"{url}?token={session_token(task.id)}"
        assert [t.id for t in sdk.sessions()] == [task.id]
        assert sdk.stop_session(task.id).state == "stopping"
        batch = sdk.submit("vision/a100", "python x.py")
        with pytest.raises(InvalidRequest):
            sdk.session(batch.id)
    with Client(live_server.url, token_for(estate.other_member)) as other:
        with pytest.raises(NotFound):
            other.session(task.id)
        assert other.sessions() == []


def test_an_agent_starts_and_reads_a_session_over_mcp(live_server, estate, jupyter):
    async def calls(client):
        kinds = await client.call_tool("list_session_kinds", {})
        started = await client.call_tool("start_session", {"compute_resource": "vision/a100"})
        read = await client.call_tool("get_session", {"task_id": body(started)["id"]})
        listed = await client.call_tool("list_sessions", {})
        stopped = await client.call_tool("stop_session", {"task_id": body(started)["id"]})
        return kinds, started, read, listed, stopped

    kinds, started, read, listed, stopped = talk(live_server, token_for(estate.member), calls)
    assert [k["name"] for k in body(kinds)["session_kinds"]] == ["JupyterLab"]
    session = body(read)
    assert session["kind"] == "session" and session["session"]["token"] == session_token(session["id"])
    assert [s["id"] for s in body(listed)["sessions"]] == [session["id"]]
    assert body(stopped)["state"] == "canceled"
    assert Task.objects.get(pk=session["id"]).channel == "mcp"


def test_stopping_a_session_refuses_a_batch_task_in_the_sdk_the_cli_and_mcp_and_leaves_it_queued(
    live_server, env, estate, jupyter
):
    with Client(live_server.url, token_for(estate.member)) as sdk:
        batch = sdk.submit("vision/a100", "python train.py")
        with pytest.raises(InvalidRequest, match=f"Task {batch.id} is a batch task, not a session"):
            sdk.stop_session(batch.id)
    refused = klique(env, "session", "stop", str(batch.id))
    assert refused.returncode == 5 and f"id: Task {batch.id} is a batch task, not a session" in refused.stderr

    async def calls(client):
        return await client.call_tool("stop_session", {"task_id": batch.id})

    answer = talk(live_server, token_for(estate.member), calls)
    assert answer.is_error and f"Task {batch.id} is a batch task, not a session" in answer.content[0].text
    assert Task.objects.get(pk=batch.id).state == Task.State.QUEUED


def test_the_owner_shares_a_session_from_the_cli_and_the_sdk_and_no_one_else_may(
    env, live_server, estate, jupyter, worker, running
):
    started = klique(env, "session", "start", "vision/a100", "--kind", "JupyterLab", "--json")
    task_id = json.loads(started.stdout)["id"]
    shared = klique(env, "session", "share", str(task_id), "victor")
    assert shared.returncode == 0, shared.stderr
    assert "Shared with  victor" in shared.stdout
    assert list(Task.objects.get(pk=task_id).session.shared_with.values_list("username", flat=True)) == [
        "victor"
    ]
    owner = Client(live_server.url, token=token_for(estate.member))
    assert owner.session_shared_with(task_id) == ["victor"]
    assert owner.share_session(task_id, []) == []
    assert "no one" in klique(env, "session", "share", str(task_id)).stdout
    with pytest.raises(InvalidRequest) as unknown:
        owner.share_session(task_id, ["nobody-here"])
    assert "users" in unknown.value.errors
    with pytest.raises(NotFound):
        Client(live_server.url, token=token_for(estate.other_member)).share_session(task_id, ["vera"])
