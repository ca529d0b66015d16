"""Backup and restore (docs/operations.md): ``deploy/check-backup.sh`` builds an estate with a day of
usage on a scratch database, dumps it (deploy/backup.sh), drops it, restores it
(deploy/restore.sh) and finds the same ledger sums and row counts. The scratch database is the test
database's server and name with ``_backup`` (e.g. ``klique_ci_backup``)."""

import os
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
