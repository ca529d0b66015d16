"""Sessions through the task API and the worker API: started with ``kind: "session"``, claimed
with their session block, measured through the heartbeat, seen (and stopped) only as RBAC allows."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.sessions.models import Session
from apps.sessions.selectors import session_token
from apps.tasks import services as lifecycle
from apps.tasks.models import Task, TaskEvent
from tests.sessions.conftest import sample

pytestmark = pytest.mark.django_db


def start(api, user, **body):
    return api(user).post(
        "/api/v1/tasks/", {"kind": "session", "compute_resource": "vision/a100", **body}, format="json"
    )


def test_a_session_is_submitted_through_the_task_api_as_a_task_of_kind_session(api, estate, jupyter):
    answer = start(api, estate.member, session_kind="JupyterLab", name="notebook")
    assert answer.status_code == 201, answer.data
    body = answer.data
    assert body["kind"] == "session" and body["state"] == "queued" and body["queue_position"] == 1
    assert body["session"]["kind"] == "JupyterLab" and body["session"]["ready"] is False
    assert body["session"]["token"] == session_token(body["id"])
    task = Task.objects.get(pk=body["id"])
    assert (task.kind, task.channel, task.command, task.gpus) == ("session", "api", "jupyter server", 1)
    assert Session.objects.get(task=task).kind == jupyter
    submitted = task.events.get(kind=TaskEvent.Kind.SUBMITTED)
    assert submitted.detail["kind"] == "session"


def test_the_session_kind_defaults_to_the_first_jupyter_kind(api, estate, jupyter, ide):
    answer = start(api, estate.member)
    assert answer.status_code == 201 and answer.data["session"]["kind"] == "JupyterLab"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"session_kind": "nope"}, "session_kind"),
        ({"session_kind": "JupyterLab", "command": "python x.py"}, "command"),
        ({"session_kind": "JupyterLab", "nodes": 2}, "nodes"),
        ({"session_kind": "JupyterLab", "spec": {"image": "x"}}, "spec"),
    ],
)
def test_bad_session_input_is_refused_naming_the_field(api, estate, jupyter, body, field):
    answer = start(api, estate.member, **body)
    assert answer.status_code == 400 and field in answer.data, answer.data
    assert not Task.objects.exists()


def test_a_batch_task_takes_no_session_kind_and_still_needs_its_command(api, estate, jupyter):
    client = api(estate.member)
    with_kind = client.post(
        "/api/v1/tasks/",
        {"compute_resource": "vision/a100", "command": "x", "session_kind": "JupyterLab"},
        format="json",
    )
    assert with_kind.status_code == 400 and "session_kind" in with_kind.data
    without = client.post("/api/v1/tasks/", {"compute_resource": "vision/a100"}, format="json")
    assert without.status_code == 400 and "command" in without.data
    batch = client.post("/api/v1/tasks/", {"compute_resource": "vision/a100", "command": "x"}, format="json")
    assert batch.status_code == 201 and batch.data["kind"] == "batch" and batch.data["session"] is None


def test_a_disabled_session_kind_is_not_offered(api, estate, jupyter, ide):
    ide.enabled = False
    ide.save()
    kinds = api(estate.member).get("/api/v1/session-kinds/")
    assert kinds.status_code == 200 and [k["name"] for k in kinds.data] == ["JupyterLab"]
    assert start(api, estate.member, session_kind="code-server").status_code == 400


def test_another_member_cannot_see_or_stop_a_session_and_it_sees_no_token(api, estate, jupyter):
    task_id = start(api, estate.member).data["id"]
    other = api(estate.other_member)
    assert other.get(f"/api/v1/tasks/{task_id}/").status_code == 404
    assert other.post(f"/api/v1/tasks/{task_id}/cancel/").status_code == 404
    listed = other.get("/api/v1/tasks/", {"kind": "session"}).data["results"]
    assert listed == []
    seen_by_it = api(estate.it).get(f"/api/v1/tasks/{task_id}/").data
    assert seen_by_it["session"]["token"] is None and seen_by_it["session"]["open_url"] is None
    assert Task.objects.get(pk=task_id).state == Task.State.QUEUED


def test_the_owner_stops_a_session_with_the_task_cancel(api, estate, jupyter):
    task_id = start(api, estate.member).data["id"]
    answer = api(estate.member).post(f"/api/v1/tasks/{task_id}/cancel/")
    assert answer.status_code == 200 and answer.data["state"] == "canceled"


def test_sessions_are_listed_with_the_kind_filter(api, estate, jupyter):
    start(api, estate.member)
    api(estate.member).post(
        "/api/v1/tasks/", {"compute_resource": "vision/a100", "command": "x"}, format="json"
    )
    listed = api(estate.member).get("/api/v1/tasks/", {"kind": "session"}).data["results"]
    assert [t["kind"] for t in listed] == ["session"]
    assert listed[0]["session"]["token"] == session_token(listed[0]["id"])


def test_the_claim_answer_carries_the_session_block_and_a_batch_task_none(api, estate, jupyter, ide, worker):
    from tests.sessions.conftest import place

    notebook = Task.objects.get(pk=start(api, estate.member).data["id"])
    editor = Task.objects.get(pk=start(api, estate.member, session_kind="code-server").data["id"])
    batch = lifecycle.submit(user=estate.member, compute_resource=estate.vision_a100, command="x")
    for task in (notebook, editor, batch):
        place(task, estate.pool)
    answer = worker.claim()
    assert answer.status_code == 200
    by_id = {t["id"]: t for t in answer.data["tasks"]}
    assert by_id[batch.pk]["session"] is None
    assert by_id[notebook.pk]["session"] == {
        "kind": "jupyter",
        "token": session_token(notebook.pk),
        "base_url": f"/sessions/{notebook.pk}/",
        "ready_path": "/api/status",
        "sample_s": 10.0,
    }
    block = by_id[editor.pk]["session"]
    assert block["kind"] == "port" and block["ready_path"] == "/healthz"
    assert block["command"] == ["code-server", "--bind-addr", "0.0.0.0:{port}", "--base-path", "{base_url}"]
    assert session_token(notebook.pk) != session_token(editor.pk)


def test_the_heartbeat_stores_the_url_once_ready_and_the_activity(api, estate, jupyter, worker, running):
    task = running(Task.objects.get(pk=start(api, estate.member).data["id"]))
    at = timezone.now() - timedelta(seconds=5)
    Task.objects.filter(pk=task.pk).update(started_at=at - timedelta(seconds=5))  # samples fall in its run
    starting = sample(at, url=f"http://gpu-1:41000/sessions/{task.pk}/", ready=False, cpu_percent=3.5)
    assert worker.heartbeat([task.pk], {str(task.pk): starting}).status_code == 200
    session = Session.objects.get(task=task)
    assert session.url == "" and session.ready is False and session.cpu_percent == 3.5
    ready = sample(
        at + timedelta(seconds=1),
        url=f"http://gpu-1:41000/sessions/{task.pk}/",
        ready=True,
        cpu_percent=12.0,
        gpu_util=40.0,
        net_bytes=1234,
        connections=1,
        last_activity=at,
    )
    assert worker.heartbeat([task.pk], {str(task.pk): ready}).status_code == 200
    session.refresh_from_db()
    assert session.ready and session.url == f"http://gpu-1:41000/sessions/{task.pk}/"
    assert (session.gpu_util, session.net_bytes, session.connections) == (40.0, 1234, 1)
    assert session.last_activity == at and session.sampled_at == at + timedelta(seconds=1)
    read = api(estate.member).get(f"/api/v1/tasks/{task.pk}/").data["session"]
    assert read["ready"] and read["open_url"] == f"{session.url}?token={session_token(task.pk)}"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("cpu_percent", "busy"),
        ("cpu_percent", -1),
        ("cpu_percent", True),
        ("gpu_util", 101),
        ("net_bytes", -5),
        ("connections", 1.5),
        ("url", "ftp://host/"),
        ("last_activity", "yesterday"),
        ("sampled_at", None),
    ],
)
def test_a_bad_session_sample_is_refused_naming_the_field(
    api, estate, jupyter, worker, running, field, value
):
    task = running(Task.objects.get(pk=start(api, estate.member).data["id"]))
    body = sample(timezone.now(), **{field: value}) if field != "sampled_at" else {"ready": False}
    if field == "sampled_at":
        body = {**sample(timezone.now()), "sampled_at": None}
    answer = worker.heartbeat([task.pk], {str(task.pk): body})
    assert answer.status_code == 400
    assert field in answer.data["sessions"][str(task.pk)], answer.data


def test_a_session_key_that_is_not_a_task_id_is_refused(worker):
    answer = worker.heartbeat([], {"abc": sample(timezone.now())})
    assert answer.status_code == 400 and "abc" in answer.data["sessions"]


def test_samples_of_tasks_that_are_not_this_workers_sessions_are_ignored(
    api, estate, jupyter, worker, running
):
    from tests.sessions.conftest import Worker

    task = running(Task.objects.get(pk=start(api, estate.member).data["id"]))
    other = Worker(estate.pool, hostname="gpu-2")
    answer = other.heartbeat([], {str(task.pk): sample(timezone.now(), cpu_percent=1.0)})
    assert answer.status_code == 200
    assert Session.objects.get(task=task).sampled_at is None
    assert worker.heartbeat([task.pk], {"999999": sample(timezone.now())}).status_code == 200


def test_a_session_key_with_thousands_of_digits_is_refused_naming_the_key_not_500(worker):
    key = "9" * 5000  # int() refuses more than 4300 digits
    body = {"tasks": [], "sessions": {key: {"sampled_at": timezone.now().isoformat()}}}
    answer = worker.http.post("/api/v1/workers/heartbeat", body, format="json")
    assert answer.status_code == 400, answer.content[:300]
    [(shown, reasons)] = answer.data["sessions"].items()
    assert shown == "9" * 18 + "..." and "Not a task id" in reasons[0]


def test_the_claim_reads_the_session_blocks_of_all_its_tasks_in_one_query(api, estate, jupyter, worker):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from tests.sessions.conftest import place

    for _ in range(3):
        place(Task.objects.get(pk=start(api, estate.member).data["id"]), estate.pool)
    with CaptureQueriesContext(connection) as queries:
        answer = worker.claim()
    assert [t["session"]["kind"] for t in answer.data["tasks"]] == ["jupyter"] * 3
    reads = [q["sql"] for q in queries if 'FROM "klique_sessions_session"' in q["sql"]]
    assert len(reads) == 1, reads


def test_it_cannot_delete_a_session_row_in_the_admin(estate, jupyter):
    from django.test import Client

    from apps.accounts.services import sync_staff
    from apps.sessions import services

    task = services.start(user=estate.member, compute_resource=estate.vision_a100, session_kind=jupyter)
    sync_staff(estate.it)
    admin = Client()
    admin.force_login(estate.it)
    refused = admin.post(f"/admin/klique_sessions/session/{task.pk}/delete/", {"post": "yes"})
    assert refused.status_code == 403 and Session.objects.filter(pk=task.pk).exists()


def test_a_session_task_without_its_session_row_fails_at_its_claim_and_is_not_handed_out(
    api, estate, jupyter, worker
):
    from tests.sessions.conftest import place

    task = Task.objects.get(pk=start(api, estate.member).data["id"])
    batch = lifecycle.submit(user=estate.member, compute_resource=estate.vision_a100, command="x")
    Session.objects.filter(pk=task.pk).delete()  # a row lost some other way than the admin
    place(task, estate.pool)
    place(batch, estate.pool)
    answer = worker.claim()
    assert answer.status_code == 200
    assert [t["id"] for t in answer.data["tasks"]] == [batch.pk]
    task.refresh_from_db()
    assert task.state == Task.State.FAILED and "session record was deleted" in task.failure
    assert not task.events.filter(kind=TaskEvent.Kind.REQUEUED).exists()
