"""The autoscaler as Celery runs it: a real worker with beat consuming only the ``autoscale``
queue, Redis as broker, PostgreSQL shared with this test."""

import os
import signal
import subprocess
import sys

import pytest

from apps.cloud.models import CloudNode
from tests.cloud_pools.conftest import wait_for
from tests.worker.live import ROOT, database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.redis]


def test_celery_beat_sends_the_pass_to_the_autoscale_queue_and_it_launches_a_node(
    settings, local_cloud, place, tmp_path
):
    import redis

    cloud_pool = local_cloud()
    place(cloud_pool.pool, 1)
    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    env = os.environ | {
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "klique.settings.base",
        "AUTOSCALE_INTERVAL_S": "1",
        "KLIQUE_PUBLIC_URL": "http://127.0.0.1:9",
    }
    args = [sys.executable, "-m", "celery", "-A", "klique", "worker", "-B", "-Q", "autoscale"]
    args += ["--concurrency", "1", "--loglevel", "INFO", "--schedule", str(tmp_path / "beat")]
    worker = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        node = wait_for(
            lambda: CloudNode.objects.filter(cloud_pool=cloud_pool, state="booting").first(),
            timeout=60,
            what="the Celery pass to launch a node",
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        output = worker.communicate(timeout=30)[0].decode()
    assert node.instance_id.startswith("local-"), output[-3000:]
    assert "klique.cloud.autoscale" in output
    assert CloudNode.objects.filter(cloud_pool=cloud_pool).count() == 1, "one node for one task"
