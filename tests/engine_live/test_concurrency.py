"""One pass at a time on real PostgreSQL, and Celery beat driving the engine on real Redis."""

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from apps.engine import core, services
from apps.engine.models import PassRecord
from apps.ledger.models import BudgetAlert
from apps.policies import services as policies
from apps.tasks.models import Task
from klique.settings.base import BASE_DIR
from tests.engine_live.test_pass import estate, submit
from tests.factories import GroupFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


def test_two_passes_started_at_once_from_two_connections_exactly_one_runs(monkeypatch):
    pool, ra, rb = estate()
    submit(ra, 6)
    real_allocate = core.allocate

    def slow_allocate(snapshot):
        time.sleep(0.5)
        return real_allocate(snapshot)

    monkeypatch.setattr(core, "allocate", slow_allocate)
    start = threading.Barrier(2)
    records = []

    def one_pass():
        start.wait()
        try:
            records.append(services.run_pass())
        finally:
            connection.close()

    threads = [threading.Thread(target=one_pass) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(r.skipped for r in records) == [False, True]
    assert [r.placed for r in records if not r.skipped] == [6]
    assert PassRecord.objects.filter(skipped=True, skip_reason="another pass running").count() == 1


def database_url() -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.mark.redis
def test_celery_beat_runs_about_one_pass_per_second_and_none_overlap_and_runs_the_meter(settings):
    pool, ra, rb = estate()
    # a budget of 36 s at weight 1, alert at 10%: the meter must warn within seconds of starting
    agents = policies.create_policy(
        group=GroupFactory(name="Agents"),
        reservation=0,
        limit=1,
        budget_hours="0.01",
        budget_period="day",
        alert_threshold=10,
    )
    (task,) = submit(policies.connect(policy=agents, profile=ra.profile), 1)
    settings.LOW_WATERMARK_S = 0
    services.run_pass(now=timezone.now() - timedelta(seconds=5))
    assert Task.objects.get(pk=task.pk).state == Task.State.PLACED
    PassRecord.objects.all().delete()
    env = os.environ | {
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "klique.settings.base",
    }
    import redis

    redis.Redis.from_url(settings.REDIS_URL).flushdb()
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "klique",
            "worker",
            "-B",
            "-Q",
            "engine,meter,sweep,celery",
            "--concurrency",
            "2",
            "--loglevel",
            "WARNING",
            "--schedule",
            f"/tmp/klique-beat-{os.getpid()}",
        ],
        cwd=BASE_DIR,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not PassRecord.objects.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        first = PassRecord.objects.order_by("started_at").first()
        assert first is not None, "no pass within 60 s of starting the worker"
        time.sleep(8)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        output = worker.communicate(timeout=30)[0].decode()
    ran = list(
        PassRecord.objects.filter(skipped=False, started_at__gte=first.started_at).order_by("started_at")
    )
    window = (ran[-1].started_at - ran[0].started_at).total_seconds()
    assert len(ran) >= 5, output[-3000:]
    assert 0.7 <= (len(ran) - 1) / window <= 1.3, [r.started_at for r in ran]
    for earlier, later in zip(ran, ran[1:], strict=False):
        assert earlier.started_at.timestamp() + earlier.duration_ms / 1000 <= later.started_at.timestamp()
    alert = BudgetAlert.objects.filter(policy=agents, kind=BudgetAlert.Kind.THRESHOLD).first()
    assert alert is not None, "the budget meter did not run: " + output[-3000:]
    assert alert.sent_at >= first.started_at - timedelta(seconds=1)
