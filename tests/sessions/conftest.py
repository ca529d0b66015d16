"""Sessions on the channel tests' estate: session kinds, a worker of the estate's pool with a real
worker token, and a helper that brings a session to running through the worker API."""

from decimal import Decimal

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from apps.pools import services as pools
from apps.pools.models import EnrolmentToken
from apps.sessions.models import SessionKind
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from apps.workers import services as protocol
from tests.channels.conftest import client_for
from tests.channels.conftest import estate as estate  # the fixture


@pytest.fixture
def api():
    return client_for


@pytest.fixture
def jupyter(db):
    return SessionKind.objects.create(name="JupyterLab", type=SessionKind.Type.JUPYTER)


@pytest.fixture
def ide(db):
    return SessionKind.objects.create(
        name="code-server",
        type=SessionKind.Type.PORT,
        command=["code-server", "--bind-addr", "0.0.0.0:{port}", "--base-path", "{base_url}"],
        ready_path="/healthz",
    )


class Worker:
    """A worker daemon of the estate's pool, talking to the real worker API."""

    def __init__(self, pool, hostname="gpu-1", gpus="8"):
        token = EnrolmentToken(pool=pool, name=hostname)
        pools.issue_enrolment_token(token, now=timezone.now())
        self.worker, secret = protocol.enrol(
            token, hostname=hostname, gpus=Decimal(gpus), mode="process", now=timezone.now()
        )
        self.gpus = gpus
        self.http = APIClient()
        self.http.credentials(HTTP_AUTHORIZATION=f"Bearer {secret}")

    def claim(self):
        body = {"free_gpus": self.gpus, "max_tasks": 100}
        return self.http.post("/api/v1/workers/claim", body, format="json")

    def started(self, task_id, at=None):
        body = {"at": at.isoformat()} if at else {}
        return self.http.post(f"/api/v1/workers/tasks/{task_id}/started", body, format="json")

    def heartbeat(self, tasks, sessions=None):
        body = {"tasks": list(tasks), **({"sessions": sessions} if sessions is not None else {})}
        return self.http.post("/api/v1/workers/heartbeat", body, format="json")

    def stopped(self, task_id):
        return self.http.post(f"/api/v1/workers/tasks/{task_id}/stopped", {}, format="json")


@pytest.fixture
def worker(estate):
    return Worker(estate.pool)


def place(task: Task, pool) -> None:
    loaded = Task.objects.select_related("compute_resource__policy", "compute_resource__profile")
    lifecycle.place_many([(loaded.get(pk=task.pk), pool)], timezone.now())


@pytest.fixture
def running(estate, worker):
    """running(task, started_at=None) -> the task placed, claimed and started on ``worker``."""

    def make(task, started_at=None):
        place(task, estate.pool)
        assert worker.claim().status_code == 200
        assert worker.started(task.pk, started_at).status_code == 200
        task.refresh_from_db()
        assert task.state == Task.State.RUNNING
        return task

    return make


def sample(at, **values) -> dict:
    """One sample as a daemon sends it; unmeasured values are null."""
    body = {
        "url": None,
        "ready": False,
        "cpu_percent": None,
        "gpu_util": None,
        "net_bytes": None,
        "connections": None,
        "last_activity": None,
        "sampled_at": at.isoformat(),
    }
    body.update({k: v.isoformat() if hasattr(v, "isoformat") else v for k, v in values.items()})
    return body
