"""`make run`'s cloud pool: the demo's "cloud-h100" autoscales on the local provider, the demo story
overflows onto it, its nodes are real `klique-worker` processes, `demo_load` starts no static worker
for it, and `cloud_release --all` (called when `make run` stops) ends every node."""

import io
import json
import signal
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
import time_machine
from django.core.management import call_command
from django.core.management.base import CommandError

from apps.cloud import services as cloud
from apps.cloud.models import CloudNode, CloudPool
from apps.engine import services as engine
from apps.pools.models import Pool, Worker
from apps.portal import demo, demo_load
from apps.portal.demo_load import DemoLoad
from apps.tasks.models import Task
from tests.cloud_pools.conftest import CLOSED, FAST_WORKER, alive, wait_for

pytestmark = pytest.mark.django_db

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


@pytest.fixture
def demo_cloud(tmp_path, monkeypatch, settings):
    """The demo estate with its cloud nodes in a folder of the test's own, reaching a closed port."""
    monkeypatch.setenv(demo.CLOUD_FOLDER_ENV, str(tmp_path / "cloud-nodes"))
    settings.CLOUD_NODE_ENVIRONMENT = FAST_WORKER
    settings.KLIQUE_PUBLIC_URL = CLOSED
    settings.LOW_WATERMARK_S = 120
    demo.seed()
    yield CloudPool.objects.get(pool__name=demo.CLOUD_POOL)
    call_command("cloud_release", "--all", "--wait", "30", stdout=io.StringIO())


def node_pids(cloud_pool: CloudPool) -> list[int]:
    ledger = json.loads((Path(cloud_pool.settings["folder"]) / "instances.json").read_text())
    return [entry["pid"] for entry in ledger.values()]


def test_the_demo_cloud_pool_autoscales_on_the_local_provider_up_to_64_gpus(demo_cloud):
    pool = Pool.objects.get(name="cloud-h100")
    assert (demo_cloud.provider, demo_cloud.enabled) == ("local", True)
    assert (demo_cloud.boot_timeout_s, demo_cloud.idle_timeout_s) == (120, 120)
    [instance_type] = demo_cloud.instance_types.all()
    assert (instance_type.name, instance_type.gpus, instance_type.max_count, instance_type.spot) == (
        "local.h100x8",
        8,
        8,
        True,
    )
    assert pool.capacity == Decimal("64"), "the declared capacity is the most it grows to"
    assert demo_cloud.settings["instance_types"] == {"local.h100x8": 8}


def test_seeding_again_creates_no_second_cloud_pool(demo_cloud):
    assert demo.seed()["cloud pools"] == 0
    assert CloudPool.objects.count() == 1


def test_an_estate_seeded_before_autoscaling_gains_its_cloud_pool(demo_cloud):
    demo_cloud.delete()
    created = demo.seed()
    assert (created["pools"], created["cloud pools"]) == (0, 1)
    assert Pool.objects.get(name="cloud-h100").cloud.instance_types.get().name == "local.h100x8"


def test_demo_load_starts_no_static_worker_for_the_autoscaled_pool(demo_cloud, tmp_path):
    processes = demo_load.start_workers(CLOSED, tmp_path / "static")
    try:
        hostnames = set()
        for process in processes:
            words = Path(f"/proc/{process.pid}/cmdline").read_bytes().split(b"\0")
            hostnames.add(words[words.index(b"--hostname") + 1].decode())
    finally:
        demo_load.stop_workers(processes, grace_s=2)
    assert signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN, "children would inherit an ignored SIGTERM"
    static = Pool.objects.filter(enabled=True).exclude(name="cloud-h100")
    assert hostnames == {f"demo-{p.name}" for p in static}
    assert "demo-cloud-h100" not in hostnames


def test_the_demo_story_grows_the_cloud_pool_and_cloud_release_ends_its_nodes(demo_cloud):
    """The story's first minute on a virtual clock (the real pass), then the real autoscaler: the
    work that overflowed onto cloud-h100 launches 8-GPU spot nodes, real processes; `cloud_release
    --all` terminates every one and records why."""
    load = DemoLoad()
    with time_machine.travel(START, tick=False) as clock:
        for second in range(0, 60, 10):
            clock.move_to(START + timedelta(seconds=second))
            load.tick(second)
            engine.run_pass(now=START + timedelta(seconds=second))
    on_cloud = Task.objects.filter(pool=demo_cloud.pool, state=Task.State.PLACED)
    assert on_cloud.count() >= 1, "owned pools are full: work overflows onto the cloud pool"
    demand = sum(int(t.gpus) * t.nodes for t in on_cloud)

    summary = cloud.autoscale()["cloud-h100"]
    nodes = list(CloudNode.objects.filter(cloud_pool=demo_cloud))
    assert summary["launched"] == len(nodes) == -(-demand // 8)
    assert {(n.state, n.market, n.instance_type.name) for n in nodes} == {("booting", "spot", "local.h100x8")}
    pids = node_pids(demo_cloud)
    assert len(pids) == len(nodes) and all(alive(pid) for pid in pids)

    CloudPool.objects.filter(pk=demo_cloud.pk).update(settings=demo_cloud.settings | {"kill_after_s": 0})
    out = io.StringIO()
    call_command("cloud_release", "--all", "--wait", "30", stdout=out)
    assert "cloud-h100: every node ended" in out.getvalue()
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=30, what="the node processes to end")
    ended = CloudNode.objects.filter(cloud_pool=demo_cloud)
    assert {(n.state, n.reason) for n in ended} == {("terminated", "released by cloud_release")}
    assert all(n.terminated_at and n.enrolment_token.revoked_at for n in ended)
    assert not Worker.objects.filter(pool=demo_cloud.pool).exists()


def test_cloud_release_names_pools_or_all_and_refuses_unknown_ones(demo_cloud):
    with pytest.raises(CommandError, match="--all"):
        call_command("cloud_release", stdout=io.StringIO())
    with pytest.raises(CommandError, match="pools: not cloud pools: hpc-slurm"):
        call_command("cloud_release", "hpc-slurm", stdout=io.StringIO())
    out = io.StringIO()
    call_command("cloud_release", "cloud-h100", stdout=out)
    assert out.getvalue().strip() == "cloud-h100: every node ended"
