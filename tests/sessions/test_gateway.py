"""Sessions through the control plane (issue 36): a real ``klique-worker`` daemon keeps its tunnel
out to a real ``klique-gateway`` in front of the live control plane; a person logged in to the
portal opens the daemon's real Jupyter server through the gateway, its kernel's WebSocket
included, without the session's token; anyone else is refused; the bytes moved count as the
session's network activity."""

import json
import time

import httpx
import pytest
import websocket  # websocket-client: a dependency of jupyter-server
from django.test import Client
from django.utils import timezone

from apps.engine import services as engine
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken
from apps.sessions import services
from apps.sessions.models import ProfileIdleLimits, Session, SessionKind
from apps.tasks.models import Task
from klique.worker import desktop
from klique.worker.client import ControlPlane
from klique.worker.daemon import Daemon, Settings
from klique.worker.process import ProcessRunner
from tests.factories import UserFactory
from tests.sessions.gateway import RunningGateway, desktop_kind
from tests.sessions.test_end_to_end import IDLE, execute_request
from tests.worker import conftest as worker_fixtures
from tests.worker.conftest import fast as fast
from tests.worker.conftest import pool as pool
from tests.worker.conftest import run_until
from tests.worker.test_sessions import stop_all

small_estate = worker_fixtures.estate

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("small_estate")]


@pytest.fixture
def gateway(live_server, settings):
    running = RunningGateway(live_server.url)
    settings.SESSION_GATEWAY_URL = running.url
    yield running
    running.stop()


@pytest.fixture
def daemon(live_server, gateway, pool, tmp_path, fast):
    raw = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="test"), now=timezone.now())
    settings = Settings("node-1", raw, ["GPU-0"], poll_min_s=0.05, poll_max_s=0.2, tick_s=0.02)
    runner = ProcessRunner(tmp_path / "node-1", tmp_path / "checkpoints")
    daemon = Daemon(settings, ControlPlane(live_server.url), runner)
    daemon.enrol()
    yield daemon
    stop_all(runner)
    if daemon.tunnel is not None:
        daemon.tunnel.stop()
    daemon.client.close()


def started(small_estate, daemon, kind: SessionKind | None = None) -> Task:
    resource, token = small_estate
    kind = kind or SessionKind.objects.create(
        name="JupyterLab", type=SessionKind.Type.JUPYTER, open_path="lab"
    )
    answer = httpx.post(
        f"{daemon.client._options['base_url'].removesuffix('/api/v1/workers/')}/api/v1/tasks/",
        headers={"Authorization": f"Bearer {token}"},
        json={"kind": "session", "compute_resource": resource.name, "session_kind": kind.name},
    )
    assert answer.status_code == 201, answer.text
    engine.run_pass()
    task = Task.objects.get(pk=answer.json()["id"])
    run_until(daemon, lambda: Session.objects.get(pk=task.pk).ready and daemon.tunnel.connected.is_set(), 90)
    daemon.tick()  # the tunnel learns the session's route
    return task


def cookies_of(user) -> dict:
    page = Client()
    page.force_login(user)
    return {name: morsel.value for name, morsel in page.cookies.items()}


def test_the_owner_opens_jupyter_and_its_kernel_through_the_gateway_without_the_token(
    small_estate, daemon, gateway
):
    task = started(small_estate, daemon)
    assert gateway.tunnels() == {daemon.log_context["worker_id"]}
    base = f"{gateway.url}/sessions/{task.pk}/"
    owner = httpx.Client(cookies=cookies_of(task.user), timeout=60, headers={"Origin": gateway.url})

    status = owner.get(base + "api/status")
    assert status.status_code == 200, status.text
    assert "last_activity" in status.json()
    kernel = owner.post(base + "api/kernels", json={"name": "python3"})
    assert kernel.status_code == 201, kernel.text
    cookie = "; ".join(f"{k}={v}" for k, v in owner.cookies.items())
    channels = websocket.create_connection(
        base.replace("http://", "ws://", 1) + f"api/kernels/{kernel.json()['id']}/channels",
        header=[f"Cookie: {cookie}"],
        origin=gateway.url,
        timeout=60,
    )
    try:
        channels.send(execute_request("print(6 * 7)"))
        deadline, said = time.monotonic() + 60, ""
        while "42" not in said and time.monotonic() < deadline:
            message = json.loads(channels.recv())
            if message.get("msg_type") == "stream":
                said += message["content"]["text"]
        assert "42" in said
    finally:
        channels.close()

    run_until(daemon, lambda: (Session.objects.get(pk=task.pk).net_bytes or 0) > 0, 30)
    assert daemon.tunnel.moved[task.pk] > 1000


def test_no_one_else_opens_it_and_no_login_goes_to_the_login_page(small_estate, daemon, gateway):
    task = started(small_estate, daemon)
    base = f"{gateway.url}/sessions/{task.pk}/"

    anonymous = httpx.get(base + "lab", timeout=30)
    assert anonymous.status_code == 302
    assert anonymous.headers["location"].endswith(f"/accounts/login/?next=/sessions/{task.pk}/lab")

    stranger = httpx.get(base + "api/status", cookies=cookies_of(UserFactory(username="eve")), timeout=30)
    assert stranger.status_code == 404

    elsewhere = httpx.post(
        base + "api/kernels",
        json={"name": "python3"},
        cookies=cookies_of(task.user),
        headers={"Origin": "https://evil.example"},
        timeout=30,
    )
    assert elsewhere.status_code == 403


def test_the_owner_shares_it_and_the_one_shared_with_opens_it(small_estate, daemon, gateway, live_server):
    task = started(small_estate, daemon)
    friend = UserFactory(username="grace")
    base = f"{gateway.url}/sessions/{task.pk}/"
    assert httpx.get(base + "api/status", cookies=cookies_of(friend), timeout=30).status_code == 404

    _, token = small_estate
    shared = httpx.put(
        f"{live_server.url}/api/v1/sessions/{task.pk}/sharing/",
        headers={"Authorization": f"Bearer {token}"},
        json={"users": ["grace"]},
        timeout=30,
    )
    assert shared.status_code == 200 and shared.json() == {"users": ["grace"]}
    gateway.gateway.cache.clear()
    assert httpx.get(base + "api/status", cookies=cookies_of(friend), timeout=30).status_code == 200


def test_the_session_link_goes_through_the_gateway(small_estate, daemon, gateway):
    task = started(small_estate, daemon)
    page = Client()
    page.force_login(task.user)
    assert f'href="{gateway.url}/sessions/{task.pk}/lab"' in page.get("/work/").content.decode()


@pytest.mark.skipif(bool(desktop.missing()), reason="needs Debian's " + " ".join(desktop.PACKAGES))
def test_the_owner_opens_a_linux_desktop_through_the_gateway(small_estate, daemon, gateway):
    kind = desktop_kind()
    task = started(small_estate, daemon, kind)
    cookies = cookies_of(task.user)
    page = httpx.get(f"{gateway.url}/sessions/{task.pk}/vnc.html", cookies=cookies, timeout=30)
    assert page.status_code == 200 and "noVNC" in page.text
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    screen = websocket.create_connection(
        f"ws://{gateway.url.removeprefix('http://')}/sessions/{task.pk}/websockify",
        header=[f"Cookie: {cookie}"],
        origin=gateway.url,
        subprotocols=["binary"],
        timeout=30,
    )
    try:
        assert screen.recv() == b"RFB 003.008\n"
    finally:
        screen.close()
    link = Client()
    link.force_login(task.user)
    opened = f"vnc.html?autoconnect=1&amp;resize=remote&amp;path=sessions/{task.pk}/websockify"
    assert opened in link.get("/work/").content.decode()


def test_traffic_through_the_tunnel_keeps_a_session_alive_and_its_end_lets_the_network_limit_stop_it(
    small_estate, daemon, gateway, settings
):
    settings.SESSION_IDLE_WARNING_S = 1
    settings.SESSION_SAMPLE_S = 0.5
    resource, _ = small_estate
    ProfileIdleLimits.objects.update_or_create(profile=resource.profile, defaults={"net_idle_s": 4})
    kind = SessionKind.objects.create(
        name="files", type=SessionKind.Type.PORT, command=["sh", "-c", IDLE], ready_path="/"
    )
    task = started(small_estate, daemon, kind)
    cookies = cookies_of(task.user)
    kept_until = time.monotonic() + 8
    while time.monotonic() < kept_until:  # twice the limit, a request every half second
        assert httpx.get(f"{gateway.url}/sessions/{task.pk}/", cookies=cookies, timeout=30).status_code == 200
        daemon.tick()
        services.check_idle()
        time.sleep(0.5)
    task.refresh_from_db()
    assert task.state == Task.State.RUNNING, task.stop_reason

    def ended():
        services.check_idle()
        task.refresh_from_db()
        return task.state == Task.State.CANCELED

    run_until(daemon, ended, 60)
    assert (task.stop_reason, Session.objects.get(pk=task.pk).stopped_by) == ("idle", "network")
