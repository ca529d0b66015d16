"""Every benchmark runs from main: each script in bench/ runs with ``--smoke`` (the same code at a
small size), exits 0 only when it did its work, and prints its report.

Those on PostgreSQL get a database of their own (``klique_bench_smoke_<script>``, on the test
database's server), dropped afterwards. kueue_replay.py's smoke covers Klique's side only: its
Slurm side starts a dev cluster of its own, which cannot run beside the suite's (SLURM_CONF)."""

import os
import shutil
import subprocess
import sys

import psycopg
import pytest
from django.conf import settings

from klique.settings.base import BASE_DIR
from tests.conftest import _fail_or_skip


def server_url(name: str) -> str:
    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{name}"


@pytest.fixture
def database(request):
    """The URL of a database for the script under test; it and its clones are dropped afterwards."""
    name = f"klique_bench_smoke_{request.node.originalname.removeprefix('test_')}"
    yield server_url(name)
    with psycopg.connect(server_url("postgres"), autocommit=True) as conn:
        for db in (name, f"{name}_template"):
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')


def need_wrk() -> None:
    if not shutil.which("wrk"):
        _fail_or_skip("wrk is not installed (apt-get install wrk; CI's .ci/run does)")


def smoke(script: str, *args: str, timeout: int = 180, **env: str) -> str:
    """Run ``bench/<script>.py --smoke``; its output, once it has exited 0."""
    base = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    done = subprocess.run(
        [sys.executable, f"bench/{script}.py", "--smoke", *args],
        cwd=BASE_DIR,
        env={**base, "DJANGO_SETTINGS_MODULE": "klique.settings.base", **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_engine_caps():
    out = smoke("engine_caps")
    assert "capped pools    0: pass" in out and "capped pools  200: pass" in out


def test_engine_core():
    out = smoke("engine_core")
    assert "| 1k | 2000 | 200 |" in out and "| all submitted at 0 | 1 s |" in out


def test_whatif():
    assert "compare():" in smoke("whatif")


def test_engine_money():
    assert "| 1k/30 |" in smoke("engine_money")


@pytest.mark.postgres
def test_engine_live(database):
    assert "| churn (3, 5 finish first) |" in smoke("engine_live", DATABASE_URL=database)


@pytest.mark.postgres
def test_lifecycle_writes(database):
    assert "| 40 | place_many |" in smoke("lifecycle_writes", DATABASE_URL=database)


@pytest.mark.postgres
def test_ledger_report(database):
    assert "| year x department |" in smoke("ledger_report", DATABASE_URL=database)


@pytest.mark.postgres
def test_submit_rate(database):
    assert '"bulk_100_tasks_per_s"' in smoke("submit_rate", DATABASE_URL=database)


@pytest.mark.postgres
def test_worker_poll(database):
    need_wrk()
    assert "claim, saturated" in smoke("worker_poll", DATABASE_URL=database)


@pytest.mark.postgres
@pytest.mark.parametrize("front", [[], ["--nginx"]], ids=["gunicorn", "behind-nginx"])
def test_worker_sync(database, front):
    need_wrk()
    if front and not shutil.which("nginx"):
        _fail_or_skip("nginx is not installed (apt-get install nginx; CI's .ci/run does)")
    out = smoke("worker_sync", *front, "--sweep", DATABASE_URL=database)
    assert "10 reports: sync" in out and "sync, saturated (64 conn.)" in out
    assert "sweeps, 0 workers marked lost" in out


@pytest.mark.postgres
@pytest.mark.redis
def test_worker_start_latency(database):
    out = smoke("worker_start_latency", DATABASE_URL=database, REDIS_URL=settings.REDIS_URL)
    assert "placed -> started" in out and "(n=3)" in out


@pytest.mark.postgres
@pytest.mark.redis
def test_kueue_replay(database):
    out = smoke("kueue_replay", "--database", database, "--redis", settings.REDIS_URL)
    assert '"klique_makespan_s"' in out


@pytest.mark.postgres
@pytest.mark.redis
def test_kueue_replay_large(database):
    out = smoke("kueue_replay", "--shape", "large", "--database", database, "--redis", settings.REDIS_URL)
    assert '"shape": "large"' in out and '"klique_over_ideal"' in out


def test_session_tunnel():
    out = smoke("session_tunnel", timeout=120)
    assert "through the tunnel" in out and "tunnel / straight" in out
