"""Structured logs (docs/operations.md): one JSON object a line with the pass, task and pool ids,
from the engine's pass, under production settings by default, and from a real worker daemon."""

import io
import json
import logging
import os
import secrets
import subprocess
import sys
import time
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.engine import services
from apps.policies import services as policies
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Worker
from apps.tasks import services as tasks
from apps.tasks.models import Task
from klique.jsonlog import JsonFormatter
from klique.settings.base import BASE_DIR
from tests.engine_live.test_pass import T0, submit
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory
from tests.worker import live


@pytest.fixture
def json_lines():
    """The lines of ``klique.engine.pass`` (DEBUG and up) written by the JSON formatter."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("klique.engine.pass")
    level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    yield lambda: [json.loads(line) for line in stream.getvalue().splitlines()]
    logger.removeHandler(handler)
    logger.setLevel(level)


def estate(capacity: int):
    pool = PoolFactory(name="onprem", capacity=capacity)
    profile = ProfileFactory(gpus=1, time_weight=Decimal("1"))
    policies.link_pool(profile, pool)
    lender = policies.create_policy(group=GroupFactory(name="Vision"), reservation=0, limit=8)
    owner = policies.create_policy(group=GroupFactory(name="Agents"), reservation=2, limit=4)
    return (
        pool,
        policies.connect(policy=lender, profile=profile),
        policies.connect(policy=owner, profile=profile),
    )


@pytest.mark.django_db
def test_an_engine_pass_logs_one_json_object_a_line_with_its_pass_task_and_pool_ids(json_lines):
    pool, borrower, owner = estate(capacity=2)
    borrowed = submit(borrower, 2)
    first = services.run_pass(now=T0)
    (reclaiming,) = submit(owner, 1)
    second = services.run_pass(now=T0 + timedelta_s(1))
    idle = services.run_pass(now=T0 + timedelta_s(2))
    lines = json_lines()
    assert all({"at", "level", "logger", "event", "pass_id"} <= set(line) for line in lines)
    assert all(line["at"].endswith("Z") and line["logger"] == "klique.engine.pass" for line in lines)
    placed = [
        (line["pass_id"], line["task_id"], line["pool_id"])
        for line in lines
        if line["event"] == "task placed"
    ]
    expected = [(first.pk, task.pk, pool.pk) for task in borrowed] + [(second.pk, reclaiming.pk, pool.pk)]
    assert placed == expected  # the preempted task had no worker yet: its GPU is free at once
    (preempted,) = [line for line in lines if line["event"] == "task preempted"]
    assert preempted["pass_id"] == second.pk and preempted["reason"] == "reclaim"
    assert preempted["task_id"] in {t.pk for t in borrowed} and preempted["pool_id"] == pool.pk
    passes = {line["pass_id"]: line for line in lines if line["event"] == "engine pass"}
    assert set(passes) == {first.pk, second.pk, idle.pk}
    assert (passes[first.pk]["level"], passes[first.pk]["placed"], passes[first.pk]["waiting"]) == (
        "info",
        2,
        0,
    )
    assert (passes[second.pk]["preempted"], passes[idle.pk]["level"]) == (1, "debug")  # nothing changed


def timedelta_s(seconds: float):
    from datetime import timedelta

    return timedelta(seconds=seconds)


def python(code: str, **env) -> subprocess.CompletedProcess:
    """``code`` run after ``django.setup()`` under production settings (no database needed)."""
    environment = {k: v for k, v in os.environ.items() if k not in {"LOG_FORMAT", "DEBUG", "REDIS_URL"}}
    environment |= {
        "DJANGO_SETTINGS_MODULE": "klique.settings.production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "klique.example.org",
        "DATABASE_URL": "sqlite:////nonexistent/unused.sqlite3",
    } | env
    command = [sys.executable, "-c", f"import django; django.setup(); {code}"]
    return subprocess.run(command, cwd=BASE_DIR, env=environment, capture_output=True, text=True, timeout=120)


LOG_A_LINE = (
    "import logging; logging.getLogger('klique.engine.pass')"
    ".info('engine pass', extra={'pass_id': 7, 'placed': 1})"
)


def test_production_logs_json_by_default_and_text_when_asked():
    done = python(LOG_A_LINE)
    assert done.returncode == 0, done.stderr
    (line,) = [json.loads(text) for text in done.stderr.splitlines()]
    assert line["event"] == "engine pass" and line["pass_id"] == 7 and line["placed"] == 1
    assert line["level"] == "info" and line["logger"] == "klique.engine.pass"
    text = python(LOG_A_LINE, LOG_FORMAT="text")
    assert text.returncode == 0
    assert text.stderr.rstrip().endswith("INFO klique.engine.pass engine pass pass_id=7 placed=1")
    wrong = python(LOG_A_LINE, LOG_FORMAT="xml")
    assert wrong.returncode != 0 and "LOG_FORMAT must be text or json, not 'xml'" in wrong.stderr


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_worker_daemon_logs_json_lines_with_its_worker_pool_and_task_ids(live_server, tmp_path):
    pool, borrower, _ = estate(capacity=1)
    token = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="logs"), now=timezone.now())
    args = [live.WORKER, "--server", live_server.url, "--gpus", "1", "--hostname", "logs-node"]
    args += ["--state-dir", str(tmp_path / "state"), "--poll-min", "0.2", "--poll-max", "1", "--tick", "0.1"]
    env = live.stack_env(KLIQUE_ENROLMENT_TOKEN=token, LOG_FORMAT="json")
    daemon = live.Process(args, env, tmp_path / "worker.log")
    try:
        task = tasks.submit(user=UserFactory(), compute_resource=borrower, command="echo logged")
        deadline = time.monotonic() + 120  # a bound on a loaded machine, not a measured wait
        while Task.objects.get(pk=task.pk).state != Task.State.SUCCEEDED:
            assert daemon.process.poll() is None, daemon.output()
            assert time.monotonic() < deadline, daemon.output()
            services.run_pass()
            time.sleep(0.2)
    finally:
        assert daemon.stop() == 0, daemon.output()
    lines = [json.loads(text) for text in daemon.output().splitlines()]
    worker = Worker.objects.get(hostname="logs-node")
    events = {line["event"]: line for line in lines if line["logger"] == "klique.worker"}
    assert {"klique-worker starting", "enrolled", "started", "ended"} <= set(events)
    assert all({"at", "level", "logger", "event"} <= set(line) for line in lines)  # httpx's too
    after_enrol = lines[[line["event"] for line in lines].index("enrolled") :]
    assert all((line["worker_id"], line["pool_id"]) == (worker.pk, pool.pk) for line in after_enrol)
    assert events["started"]["task_id"] == task.pk and events["ended"]["task_id"] == task.pk
    assert events["ended"]["exit_code"] == 0
