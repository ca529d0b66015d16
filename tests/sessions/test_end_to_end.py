"""End to end on the real stack: a session started through the API is placed by the engine's
pass, claimed by a ``klique-worker`` daemon in process mode that runs a real Jupyter server (or a
command on a port), opened with its token; left idle it is stopped by the CPU-idle limit or by
its lifetime, kept busy it is not; the ledger shows its interval and the developer's page why it
stopped. The daemon talks to the real views through Django's WSGI handler (tests/worker)."""

import json
import sys
import time
import uuid
from datetime import UTC, datetime

import httpx
import pytest
import websocket  # websocket-client: a dependency of jupyter-server
from django.test import Client
from rest_framework.test import APIClient

from apps.engine import services as engine
from apps.sessions import services
from apps.sessions.models import ProfileIdleLimits, Session, SessionKind
from apps.sessions.selectors import session_token
from apps.tasks.models import Task, TaskEvent
from tests.worker import conftest as worker_fixtures
from tests.worker.conftest import fast as fast
from tests.worker.conftest import make_daemon as make_daemon
from tests.worker.conftest import network as network
from tests.worker.conftest import pool as pool
from tests.worker.conftest import run_until
from tests.worker.test_sessions import stop_all

small_estate = worker_fixtures.estate  # one group on one pool, a member with a token

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("small_estate")]
BUSY = (
    "mkdir -p .{base_url} && "
    f"{sys.executable} -c 'while True: pass' & "
    f"exec {sys.executable} -m http.server {{port}} --bind 127.0.0.1"
)
# A kernel kept busy: one core all along, and a dot every second (an IOPub message, which is what
# moves Jupyter's last_activity; a silent ``while True: pass`` keeps the CPU busy but not that).
BUSY_KERNEL = """import time
while True:
    began = time.monotonic()
    while time.monotonic() - began < 1:
        pass
    print(".", end="", flush=True)
"""
IDLE = f"mkdir -p .{{base_url}} && exec {sys.executable} -m http.server {{port}} --bind 127.0.0.1"


@pytest.fixture
def short(settings):
    settings.SESSION_IDLE_WARNING_S = 1
    settings.SESSION_SAMPLE_S = 0.5


def start(small_estate, kind: SessionKind, **limits) -> Task:
    resource, token = small_estate
    ProfileIdleLimits.objects.update_or_create(profile=resource.profile, defaults=limits)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.post(
        "/api/v1/tasks/",
        {"kind": "session", "compute_resource": resource.name, "session_kind": kind.name},
        format="json",
    )
    assert answer.status_code == 201, answer.content
    engine.run_pass()
    task = Task.objects.get(pk=answer.json()["id"])
    assert task.state == Task.State.PLACED
    return task


def ready(daemon, task) -> Session:
    run_until(daemon, lambda: Session.objects.get(pk=task.pk).ready, timeout=90)
    return Session.objects.get(pk=task.pk)


def run_checking(daemon, until, timeout):
    """Tick the daemon and run the idle check as the beat does, until ``until()`` holds."""

    def done():
        services.check_idle()
        return until()

    run_until(daemon, done, timeout=timeout)


def ended(task) -> bool:
    task.refresh_from_db()
    return task.state == Task.State.CANCELED


@pytest.fixture
def daemon(make_daemon):
    daemon = make_daemon(gpus=1)
    daemon.settings.session_host = "127.0.0.1"
    yield daemon
    stop_all(daemon.runner)


def test_an_idle_jupyter_session_opens_with_its_token_and_is_stopped_by_the_cpu_limit(
    small_estate, short, daemon
):
    kind = SessionKind.objects.create(name="JupyterLab", type=SessionKind.Type.JUPYTER)
    task = start(small_estate, kind, cpu_idle_s=3, cpu_below_pct=5)
    session = ready(daemon, task)
    token = session_token(task.pk)
    assert session.url == f"http://127.0.0.1:{daemon.sessions[task.pk].port}/sessions/{task.pk}/"
    assert httpx.get(f"{session.url}api/status", params={"token": token}, timeout=10).status_code == 200
    assert httpx.get(f"{session.url}api/status", timeout=10).status_code == 403
    run_checking(daemon, lambda: ended(task), timeout=90)
    session.refresh_from_db()
    assert (task.stop_reason, session.stopped_by, task.preemption_count) == ("idle", "cpu", 0)
    stop = task.events.get(kind=TaskEvent.Kind.STOP_REQUESTED)
    assert stop.detail["limit"] == "cpu" and stop.detail["limit_s"] == 3
    assert task.events.filter(kind=TaskEvent.Kind.ENDED, reason="idle").exists()
    interval = task.intervals.get()
    assert interval.start == task.placed_at and interval.end == task.ended_at
    assert task.pk not in daemon.sessions
    page = Client()
    page.force_login(task.user)
    assert "stopped: idle (cpu limit)" in page.get("/work/").content.decode()


def test_an_idle_jupyter_session_is_stopped_by_its_lifetime(small_estate, short, daemon):
    kind = SessionKind.objects.create(name="JupyterLab", type=SessionKind.Type.JUPYTER)
    task = start(small_estate, kind, max_lifetime_s=4)
    ready(daemon, task)
    run_checking(daemon, lambda: ended(task), timeout=60)
    assert task.stop_reason == "idle" and Session.objects.get(pk=task.pk).stopped_by == "lifetime"
    assert (task.ended_at - task.started_at).total_seconds() >= 4


def test_a_busy_session_is_not_stopped_by_the_cpu_limit(small_estate, short, daemon):
    kind = SessionKind.objects.create(
        name="busy", type=SessionKind.Type.PORT, command=["sh", "-c", BUSY], ready_path="/"
    )
    task = start(small_estate, kind, cpu_idle_s=3, cpu_below_pct=5)
    ready(daemon, task)
    samples = []

    def busy_for_a_while():
        session = Session.objects.get(pk=task.pk)
        if session.cpu_percent is not None and (not samples or samples[-1] != session.sampled_at):
            samples.append(session.sampled_at)
        return len(samples) >= 8

    run_checking(daemon, busy_for_a_while, timeout=90)
    task.refresh_from_db()
    session = Session.objects.get(pk=task.pk)
    assert task.state == Task.State.RUNNING and session.cpu_idle_since is None
    assert session.cpu_percent > 5


def test_an_idle_port_session_is_stopped_by_the_cpu_limit(small_estate, short, daemon):
    kind = SessionKind.objects.create(
        name="idle", type=SessionKind.Type.PORT, command=["sh", "-c", IDLE], ready_path="/"
    )
    task = start(small_estate, kind, cpu_idle_s=2, cpu_below_pct=5)
    ready(daemon, task)
    began = time.monotonic()
    run_checking(daemon, lambda: ended(task), timeout=60)
    assert time.monotonic() - began >= 2
    assert Session.objects.get(pk=task.pk).stopped_by == "cpu"


def execute_request(code: str) -> str:
    """An ``execute_request`` of the Jupyter messaging protocol, as sent on a kernel's websocket."""
    header = {
        "msg_id": uuid.uuid4().hex,
        "msg_type": "execute_request",
        "username": "test",
        "session": uuid.uuid4().hex,
        "version": "5.3",
        "date": datetime.now(UTC).isoformat(),
    }
    content = {"code": code, "silent": False, "store_history": False, "user_expressions": {}}
    content.update(allow_stdin=False, stop_on_error=True)
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content}
    return json.dumps({**message, "channel": "shell", "buffers": []})


def test_a_jupyter_session_whose_kernel_runs_a_loop_is_not_stopped_until_the_kernel_stops(
    small_estate, short, daemon
):
    kind = SessionKind.objects.create(name="JupyterLab", type=SessionKind.Type.JUPYTER)
    task = start(small_estate, kind, cpu_idle_s=3, cpu_below_pct=5)
    session = ready(daemon, task)
    auth = {"Authorization": f"token {session_token(task.pk)}"}
    kernel = httpx.post(f"{session.url}api/kernels", headers=auth, json={"name": "python3"}, timeout=60)
    assert kernel.status_code == 201, kernel.text
    kernel_url = f"{session.url}api/kernels/{kernel.json()['id']}"
    channels = websocket.create_connection(
        kernel_url.replace("http://", "ws://", 1) + "/channels",
        header=[f"{name}: {value}" for name, value in auth.items()],
        timeout=60,
    )
    try:
        channels.send(execute_request(BUSY_KERNEL))
        sent = datetime.now(UTC)

        # Idle from ready to here (a slow start) counts toward the 3 s limit: checked from the
        # first sample taken since the loop runs, as the beat would be by then.
        def busy_since_sent():
            session = Session.objects.get(pk=task.pk)
            return session.sampled_at > sent and (session.cpu_percent or 0) > 5

        run_until(daemon, busy_since_sent, timeout=60)
        samples, activity = [], set()

        def busy_for_a_while():
            session = Session.objects.get(pk=task.pk)
            if session.cpu_percent is not None and (not samples or samples[-1][0] != session.sampled_at):
                samples.append((session.sampled_at, session.cpu_percent))
                activity.add(session.last_activity)
            return len(samples) >= 9

        run_checking(daemon, busy_for_a_while, timeout=120)
        task.refresh_from_db()
        assert task.state == Task.State.RUNNING
        assert all(cpu > 5 for _, cpu in samples), samples
        assert Session.objects.get(pk=task.pk).cpu_idle_since is None
        assert len(activity - {None}) >= 3  # Jupyter's last_activity kept moving
        interrupted = httpx.post(f"{kernel_url}/interrupt", headers=auth, timeout=60)
        assert interrupted.status_code == 204, interrupted.text
    finally:
        channels.close()
    run_checking(daemon, lambda: ended(task), timeout=120)
    assert Session.objects.get(pk=task.pk).stopped_by == "cpu" and task.stop_reason == "idle"
