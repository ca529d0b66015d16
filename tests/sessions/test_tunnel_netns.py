"""Done-when of issue 36's sessions: a real ``klique-worker`` process runs in a network namespace
whose firewall refuses every inbound connection (only loopback and the answers to its own
connections come in); its Jupyter session binds every address there. Nobody reaches the session
directly, yet its owner opens it through the ``klique-gateway``, over the tunnel the daemon keeps
open outbound. Needs root, ``ip`` and ``iptables`` (CI has them)."""

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from django.test import Client
from django.utils import timezone
from pytest_django.live_server_helper import LiveServer

from apps.engine import services as engine
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken
from apps.sessions.models import Session, SessionKind
from apps.tasks.models import Task
from tests.sessions.gateway import RunningGateway
from tests.worker import conftest as worker_fixtures
from tests.worker.conftest import pool as pool

small_estate = worker_fixtures.estate

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables"),
        reason="needs root, ip and iptables (a network namespace behind a firewall)",
    ),
]


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@pytest.fixture
def walled():
    """A network namespace joined to the host by a veth pair, refusing inbound connections: the
    host's address and the namespace's."""
    tag = f"{os.getpid() % 10000}{random.randrange(100)}"
    net, host_if, ns_if = f"kq{tag}", f"kqh{tag}", f"kqn{tag}"
    subnet = f"10.{random.randrange(200, 250)}.{random.randrange(256)}"
    inside = ("ip", "netns", "exec", net)
    sh("ip", "netns", "add", net)
    try:
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if)
        sh("ip", "link", "set", ns_if, "netns", net)
        sh("ip", "addr", "add", f"{subnet}.1/30", "dev", host_if)
        sh("ip", "link", "set", host_if, "up")
        sh(*inside, "ip", "addr", "add", f"{subnet}.2/30", "dev", ns_if)
        sh(*inside, "ip", "link", "set", ns_if, "up")
        sh(*inside, "ip", "link", "set", "lo", "up")
        sh(*inside, "iptables", "-A", "INPUT", "-i", "lo", "-j", "ACCEPT")
        sh(
            *inside,
            "iptables",
            "-A",
            "INPUT",
            "-m",
            "conntrack",
            "--ctstate",
            "ESTABLISHED,RELATED",
            "-j",
            "ACCEPT",
        )
        sh(*inside, "iptables", "-A", "INPUT", "-j", "DROP")
        yield net, f"{subnet}.1", f"{subnet}.2"
    finally:
        subprocess.run(["ip", "netns", "del", net], capture_output=True)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True)


@pytest.fixture
def control_plane(walled, settings):
    """The live control plane on the host's side of the veth pair, the gateway beside it."""
    _, host_ip, _ = walled
    server = LiveServer(f"{host_ip}:0")
    server._live_server_modified_settings.enable()
    gateway = RunningGateway(server.url, host=host_ip)
    settings.SESSION_GATEWAY_URL = gateway.url
    yield server, gateway
    gateway.stop()
    server._live_server_modified_settings.disable()
    server.stop()


def test_a_session_behind_a_firewall_refusing_inbound_opens_through_the_gateway_only(
    small_estate, pool, walled, control_plane, tmp_path
):
    net, _, worker_ip = walled
    server, gateway = control_plane
    resource, token = small_estate
    raw = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="walled"), now=timezone.now())
    kind = SessionKind.objects.create(name="JupyterLab", type=SessionKind.Type.JUPYTER, open_path="lab")
    environ = {**os.environ, "KLIQUE_ENROLMENT_TOKEN": raw}
    daemon = subprocess.Popen(
        [
            "ip",
            "netns",
            "exec",
            net,
            str(Path(sys.executable).parent / "klique-worker"),
            "--server",
            server.url,
        ]
        + ["--gpus", "1", "--hostname", "walled-1", "--state-dir", str(tmp_path / "state")]
        + ["--session-host", "0.0.0.0", "--poll-min", "0.2", "--poll-max", "1"],
        env=environ,
        stdout=open(tmp_path / "daemon.log", "wb"),
        stderr=subprocess.STDOUT,
        cwd=Path(__file__).resolve().parents[2],
    )
    try:
        answer = httpx.post(
            f"{server.url}/api/v1/tasks/",
            headers={"Authorization": f"Bearer {token}"},
            json={"kind": "session", "compute_resource": resource.name, "session_kind": kind.name},
            timeout=30,
        )
        assert answer.status_code == 201, answer.text
        task_id = answer.json()["id"]
        deadline = time.monotonic() + 120
        while not Session.objects.filter(pk=task_id, ready=True).exists() or not gateway.tunnels():
            assert time.monotonic() < deadline, (tmp_path / "daemon.log").read_text()[-3000:]
            assert daemon.poll() is None, (tmp_path / "daemon.log").read_text()[-3000:]
            engine.run_pass()
            time.sleep(0.5)
        session = Session.objects.get(pk=task_id)
        port = int(session.url.rsplit(":", 1)[1].split("/", 1)[0])

        with pytest.raises(OSError):
            socket.create_connection((worker_ip, port), timeout=3).close()

        page = Client()
        page.force_login(Task.objects.get(pk=task_id).user)
        cookies = {name: morsel.value for name, morsel in page.cookies.items()}
        base = f"{gateway.url}/sessions/{task_id}/"
        deadline = time.monotonic() + 30
        while (status := httpx.get(base + "api/status", cookies=cookies, timeout=30)).status_code == 404:
            assert time.monotonic() < deadline, status.text  # the daemon's next tick routes the session
            time.sleep(0.5)
        assert status.status_code == 200, status.text
        lab = httpx.get(base + "lab", cookies=cookies, timeout=60)
        assert lab.status_code in (200, 404), (
            lab.text
        )  # 404: JupyterLab not installed, jupyter-server answered
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(60)
        except subprocess.TimeoutExpired:
            daemon.kill()
