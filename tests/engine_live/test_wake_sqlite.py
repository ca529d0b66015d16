"""Without Redis, on the SQLite embedded default, a pass request from another process (the web
server) wakes the ``run_engine`` loop through the wake file beside the database."""

import os
import sqlite3
import subprocess
import sys
import time

import pytest

from klique.settings.base import BASE_DIR

REQUEST = (
    "import django; django.setup(); from apps.tasks import wake; wake.request_pass(); "
    "print('requested', flush=True)"
)


@pytest.fixture
def sqlite_env(tmp_path):
    path = tmp_path / "db.sqlite3"
    env = os.environ | {"DATABASE_URL": f"sqlite:///{path}", "DJANGO_SETTINGS_MODULE": "klique.settings.base"}
    env.pop("REDIS_URL", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v0"], cwd=BASE_DIR, env=env, check=True
    )
    return env, path


def passes(path) -> int:
    with sqlite3.connect(path, timeout=30) as db:
        return db.execute("SELECT count(*) FROM engine_passrecord").fetchone()[0]


def test_a_request_from_another_process_wakes_the_run_engine_loop(sqlite_env):
    sqlite_env, path = sqlite_env
    engine = subprocess.Popen(
        [sys.executable, "manage.py", "run_engine", "--interval", "300", "--passes", "2"],
        cwd=BASE_DIR,
        env=sqlite_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while passes(path) < 1:
            assert time.monotonic() < deadline and engine.poll() is None, "no first pass"
            time.sleep(0.05)
        asked = subprocess.run(
            [sys.executable, "-c", REQUEST], cwd=BASE_DIR, env=sqlite_env, capture_output=True, text=True
        )
        assert asked.stdout.strip() == "requested", asked.stderr[-3000:]
        # With a five-minute interval, the second pass (and the loop's end) can only come from it.
        out, _ = engine.communicate(timeout=60)
    finally:
        engine.kill()
    assert engine.returncode == 0 and "Klique engine stopped" in out, out[-3000:]
