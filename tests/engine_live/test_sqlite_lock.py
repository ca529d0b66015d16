"""On SQLite (the embedded default, where ``make run`` with REDIS_URL starts a Celery worker with
two processes) one pass at a time holds across processes: the lock is a file lock beside the
database file, which the kernel frees when its holder dies."""

import os
import signal
import subprocess
import sys

import pytest

from klique.settings.base import BASE_DIR

fcntl = pytest.importorskip("fcntl")


@pytest.fixture(scope="module")
def sqlite_env(tmp_path_factory):
    path = tmp_path_factory.mktemp("sqlite-lock") / "db.sqlite3"
    env = os.environ | {"DATABASE_URL": f"sqlite:///{path}", "DJANGO_SETTINGS_MODULE": "klique.settings.base"}
    env.pop("REDIS_URL", None)
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--no-input", "-v0"], cwd=BASE_DIR, env=env, check=True
    )
    return env, path


def start(env, what):
    return subprocess.Popen(
        [sys.executable, "-m", "tests.engine_live.sqlite_pass", what],
        cwd=BASE_DIR,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def one_pass(env) -> str:
    process = start(env, "pass")
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err[-3000:]
    return out.strip()


def hold(env):
    holder = start(env, "hold")
    line = holder.stdout.readline().strip()
    assert line == "held True", holder.stderr.read()[-3000:] if not line else line
    return holder


def test_a_pass_in_another_process_is_skipped_while_one_process_holds_the_sqlite_lock(sqlite_env):
    env, path = sqlite_env
    holder = hold(env)
    try:
        assert one_pass(env) == "skipped another pass running"
        second = start(env, "hold")
        assert second.stdout.readline().strip() == "held False"
        second.communicate(timeout=30)
    finally:
        holder.communicate(input="", timeout=30)
    assert os.path.exists(f"{path}.engine-lock")
    assert one_pass(env) == "ran"


def test_the_sqlite_lock_is_freed_when_its_holder_is_killed(sqlite_env):
    env, _ = sqlite_env
    holder = hold(env)
    os.kill(holder.pid, signal.SIGKILL)
    holder.communicate(timeout=30)
    assert one_pass(env) == "ran"
