"""Cloud pools on real parts: the local provider's nodes are real ``klique-worker`` processes,
EC2 is moto's server over HTTP (the session fixture of ``tests/cloud``)."""

import json
import time
from decimal import Decimal
from pathlib import Path

import pytest
from django.utils import timezone

from apps.cloud import services as cloud
from apps.cloud.models import CloudNode
from apps.pools.models import Pool
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from klique.cloud.providers import open_provider
from tests.cloud.conftest import moto_endpoint  # noqa: F401  (the session fixture, shared)
from tests.factories import ComputeResourceFactory, GpuTypeFactory, ProfileFactory, UserFactory

# The nodes' workers poll, retry and tick fast so that the tests take seconds.
FAST_WORKER = {
    "KLIQUE_WORKER_POLL_MIN_S": "0.2",
    "KLIQUE_WORKER_POLL_MAX_S": "1",
    "KLIQUE_WORKER_RETRY_MAX_S": "1",
    "KLIQUE_WORKER_TICK_S": "0.1",
}
CLOSED = "http://127.0.0.1:9"  # nothing answers: a node there never enrols


@pytest.fixture
def fast_nodes(settings):
    settings.CLOUD_NODE_ENVIRONMENT = FAST_WORKER
    settings.KLIQUE_PUBLIC_URL = CLOSED
    return settings


@pytest.fixture
def local_cloud(tmp_path, fast_nodes):
    """local_cloud(**provider settings and pool fields) -> a cloud pool of local nodes; every node
    still alive at the end is SIGKILLed with its tasks."""
    made = []

    def make(name="burst", types=(("local.1gpu", 1, 2, True),), spot_available=True, **fields):
        pool = Pool.objects.create(name=name, kind=Pool.Kind.CLOUD, gpu_type=GpuTypeFactory(), capacity=0)
        folder = tmp_path / f"cloud-{name}"
        settings = {
            "folder": str(folder),
            "instance_types": {t[0]: t[1] for t in types},
            "spot_available": spot_available,
            "kill_after_s": 0,
        }
        cloud_pool = cloud.create_cloud_pool(pool=pool, provider="local", settings=settings, **fields)
        for rank, (type_name, gpus, max_count, spot) in enumerate(types):
            cloud.add_instance_type(
                cloud_pool, name=type_name, gpus=gpus, max_count=max_count, rank=rank, spot=spot
            )
        made.append(folder)
        return cloud_pool

    yield make
    for folder in made:
        provider = open_provider("local", {"folder": str(folder), "kill_after_s": 0})
        ledger = folder / "instances.json"
        if not ledger.exists():
            continue
        entries = json.loads(ledger.read_text())
        ids = [key for key, entry in entries.items() if entry["state"] != "terminated"]
        if ids:
            provider.terminate(ids)
            provider.terminate(ids)  # past kill_after_s: SIGKILL with the task process groups


@pytest.fixture
def place():
    """place(pool, n, gpus) -> tasks placed on the pool, as the engine places them."""
    user = UserFactory()

    def make(pool, n=1, gpus="1"):
        profile = ProfileFactory(gpus=Decimal(gpus))
        profile.pools.add(pool)
        resource = ComputeResourceFactory(profile=profile)
        tasks = [lifecycle.submit(user=user, compute_resource=resource, command="sleep 1") for _ in range(n)]
        loaded = Task.objects.select_related("compute_resource__policy", "compute_resource__profile")
        placements = [(loaded.get(pk=t.pk), pool) for t in tasks]
        lifecycle.place_many(placements, timezone.now())
        return [t for t, _ in placements]

    return make


def wait_for(check, timeout: float = 60, every: float = 0.2, what: str = "the condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def alive(pid: int) -> bool:
    """A live process (not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in "ZX"


def node_pid(cloud_pool, node: CloudNode) -> int:
    ledger = json.loads((Path(cloud_pool.settings["folder"]) / "instances.json").read_text())
    return ledger[node.instance_id]["pid"]


def process_environment(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)
