"""The daemon against the real control plane in-process: its HTTP requests go through Django's
WSGI handler (httpx's WSGI transport) to the real views and database, and its tasks run as real
subprocesses. ``Network.down`` cuts the line to simulate an unreachable control plane."""

import time
from decimal import Decimal

import httpx
import pytest
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.utils import timezone

from apps.pools import services
from apps.pools.models import EnrolmentToken
from klique.worker.client import ControlPlane
from klique.worker.daemon import Daemon, Settings
from klique.worker.process import ProcessRunner
from klique.worker.slurm import SlurmRunner
from tests.factories import PoolFactory
from tests.pools.conftest import place  # noqa: F401  (the fixture, shared)


class Network(httpx.BaseTransport):
    def __init__(self):
        self.app = httpx.WSGITransport(app=get_wsgi_application())
        self.down = False
        self.requests = 0

    def handle_request(self, request):
        """As Django's test client does, keep the test's connection open across the request."""
        self.requests += 1
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        for signal in (signals.request_started, signals.request_finished):
            signal.disconnect(close_old_connections)
        try:
            response = self.app.handle_request(request)
            response.read()
        finally:
            for signal in (signals.request_started, signals.request_finished):
                signal.connect(close_old_connections)
        return response


@pytest.fixture
def fast(settings):
    settings.WORKER_HEARTBEAT_S = 0.2
    settings.WORKER_STOP_GRACE_S = 1
    return settings


@pytest.fixture
def pool():
    return PoolFactory(name="onprem", capacity=Decimal("64"))


@pytest.fixture
def network():
    return Network()


@pytest.fixture
def make_daemon(pool, network, tmp_path, fast):
    raw = services.issue_enrolment_token(EnrolmentToken(pool=pool, name="test"), now=timezone.now())

    def make(gpus=2, hostname="node-1", slurm=None):
        """A daemon enrolled in ``pool``; ``slurm`` (a dict of SlurmRunner options) for Slurm mode."""
        settings = Settings(
            hostname=hostname,
            enrolment_token=raw,
            devices=[f"GPU-{i}" for i in range(gpus)],
            poll_min_s=0.05,
            poll_max_s=0.2,
            retry_max_s=0.5,
            tick_s=0.02,
        )
        client = ControlPlane("http://testserver", transport=network)
        if slurm is None:
            runner = ProcessRunner(tmp_path / hostname, tmp_path / "checkpoints")
        else:
            runner = SlurmRunner(tmp_path / hostname, tmp_path / "checkpoints", tag=hostname, **slurm)
        daemon = Daemon(settings, client, runner)
        daemon.enrol()
        return daemon

    return make


def run_until(daemons, done, timeout=15.0):
    """Tick the daemons until ``done()`` holds; fail after ``timeout`` seconds."""
    daemons = daemons if isinstance(daemons, list) else [daemons]
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        for daemon in daemons:
            daemon.tick()
        time.sleep(0.02)


@pytest.fixture
def estate(pool):
    """One group on ``pool``: a one-GPU profile, a policy (reservation 1, limit 4), its compute
    resource, and a member with a personal API token to submit with."""
    from apps.accounts import services as accounts
    from apps.accounts.models import Membership
    from apps.policies import services as policies
    from tests.factories import GroupFactory, UserFactory

    group = GroupFactory(name="Vision", slug="vision")
    profile = policies.create_profile(name="1gpu", gpus=1, pools=[pool])
    policy = policies.create_policy(group=group, reservation=1, limit=4)
    resource = policies.connect(policy=policy, profile=profile, name="vision-1gpu")
    user = UserFactory(username="ada")
    accounts.add_membership(user=user, group=group, role=Membership.Role.MEMBER)
    _, token = accounts.create_api_token(user=user, name="tests")
    return resource, token


def submit(token: str, resource, command: str) -> int:
    """Submit through the tasks API as the estate's user; the new task's id."""
    from rest_framework.test import APIClient

    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    answer = client.post(
        "/api/v1/tasks/", {"compute_resource": resource.name, "command": command}, format="json"
    )
    assert answer.status_code == 201, answer.content
    return answer.json()["id"]
