"""Backup and restore (docs/operations.md): ``deploy/check-backup.sh`` builds an estate with a day of
usage on a scratch database, dumps it (deploy/backup.sh), drops it, restores it
(deploy/restore.sh) and finds the same ledger sums and row counts. The scratch database is the test
database's server and name with ``_backup`` (e.g. ``klique_ci_backup``)."""

import os
import socket
import subprocess
import sys

import pytest
from django.conf import settings

from klique.settings.base import BASE_DIR

pytestmark = pytest.mark.postgres


def test_a_dump_dropped_and_restored_gives_back_the_same_ledger_sums(tmp_path):
    db = settings.DATABASES["default"]
    auth = db["USER"] or "postgres"
    if db["PASSWORD"]:
        auth += f":{db['PASSWORD']}"
    server = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    name = db["NAME"].removeprefix("test_") + "_backup"
    env = {k: v for k, v in os.environ.items() if k not in {"REDIS_URL", "DATABASE_URL"}}
    env |= {"CHECK_BACKUP_SERVER": server, "CHECK_BACKUP_DB": name, "PYTHON": sys.executable}
    done = subprocess.run(
        [str(BASE_DIR / "deploy/check-backup.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "after the restore: the same ledger sums, per group and per pool, and the same row counts"
        in done.stdout
    )
    assert "GPU-hours" in done.stdout and "restored" in done.stdout


def server_and_name(suffix: str) -> tuple[str, str]:
    """The test database's server as a URL, and a scratch database name beside it."""
    db = settings.DATABASES["default"]
    auth = db["USER"] or "postgres"
    if db["PASSWORD"]:
        auth += f":{db['PASSWORD']}"
    server = f"postgres://{auth}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    return server, db["NAME"].removeprefix("test_") + suffix


def psql(url: str, *sql: str) -> str:
    args = ["psql", url, "-v", "ON_ERROR_STOP=1", "-qAt"] + [part for s in sql for part in ("-c", s)]
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def test_the_dump_is_readable_by_its_owner_only_and_a_plain_owner_restores_it_without_warnings(tmp_path):
    server, name = server_and_name("_umask")
    role = f"{name}_owner"
    source, target = f"{server}/{name}", f"postgres://{role}@{server.split('@', 1)[1]}/{name}_to"
    admin = f"{server}/postgres"
    drop = (f"DROP DATABASE IF EXISTS {name} WITH (FORCE)", f"DROP DATABASE IF EXISTS {name}_to WITH (FORCE)")
    psql(admin, *drop, f"DROP ROLE IF EXISTS {role}")
    try:
        psql(
            admin,
            f"CREATE DATABASE {name}",
            f"CREATE ROLE {role} LOGIN",
            f"CREATE DATABASE {name}_to OWNER {role}",
        )
        psql(
            source, "CREATE TABLE kept (id int PRIMARY KEY)", "INSERT INTO kept SELECT generate_series(1, 50)"
        )
        env = os.environ | {"DATABASE_URL": source}
        dump = tmp_path / "klique.dump"
        # a umask that would leave the file world-readable: backup.sh sets its own
        done = subprocess.run(
            ["sh", "-c", 'umask 022 && exec "$0" "$1"', str(BASE_DIR / "deploy/backup.sh"), str(dump)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert dump.stat().st_mode & 0o777 == 0o600
        done = subprocess.run(
            [str(BASE_DIR / "deploy/restore.sh"), str(dump)],
            env=os.environ | {"DATABASE_URL": target},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert "WARNING" not in done.stderr, done.stderr  # no "only superuser can analyze" per catalog
        assert done.stderr == ""
        analyzed = (
            "SELECT count(*) FROM pg_stat_user_tables WHERE relname = 'kept' AND last_analyze IS NOT NULL"
        )
        assert psql(target, "SELECT count(*) FROM kept", analyzed).split() == ["50", "1"]
    finally:
        psql(admin, *drop, f"DROP ROLE IF EXISTS {role}")


def test_point_in_time_recovery_brings_back_only_the_rows_before_the_target_time():
    with socket.socket() as s:  # two free ports in a row are likely above a free one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = subprocess.run(
        [str(BASE_DIR / "deploy/check-pitr.sh")],
        env=os.environ | {"PITR_PORT": str(port)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert ": 100 rows from before it, 0 from after it" in done.stdout
    assert "only the rows written before the target time exist" in done.stdout
