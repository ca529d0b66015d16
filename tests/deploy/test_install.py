"""The VM install and upgrade (docs/deploy.md, "Path 3"): ``deploy/check-install.sh`` runs
``deploy/install.sh`` into a temporary root against the real PostgreSQL and Redis, then
``deploy/upgrade.sh`` to a next release, and checks the probes, an admin login, the estate and that
every row was kept. The quick tests check the scripts with shellcheck, the refusal without systemd
and ``deploy/unitrun.py``'s reading of the shipped units."""

import os
import shutil
import socket
import subprocess
import sys

import pytest
from django.conf import settings

from klique.settings.base import BASE_DIR

DEPLOY = BASE_DIR / "deploy"
SCRIPTS = ["install.sh", "upgrade.sh", "install-lib.sh", "check-install.sh", "manage.sh", "check-pitr.sh"]
SCRIPTS += ["backup.sh", "restore.sh"]
sys.path.insert(0, str(DEPLOY))
import unitrun  # noqa: E402


def test_the_scripts_pass_shellcheck():
    if not shutil.which("shellcheck"):
        if os.environ.get("CI"):
            pytest.fail("shellcheck is not installed (CI is set)")
        pytest.skip("shellcheck is not installed (apt-get install shellcheck)")
    done = subprocess.run(
        ["shellcheck", "-x", *(f"deploy/{script}" for script in SCRIPTS)],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,  # -x: install-lib.sh
    )
    assert done.returncode == 0, done.stdout


@pytest.mark.skipif(os.path.isdir("/run/systemd/system"), reason="systemd runs here")
def test_install_without_systemd_asks_for_no_systemd(tmp_path):
    done = subprocess.run(
        [DEPLOY / "install.sh", "--prefix", tmp_path / "opt", "--user", subprocess.getoutput("id -un")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "systemd is not running here" in done.stderr and "--no-systemd" in done.stderr
    assert not (tmp_path / "opt").exists()


def test_unitrun_reads_the_shipped_units_as_systemd_does(tmp_path):
    env_file = tmp_path / "klique.env"
    env_file.write_text('# comment\nWEB_BIND=127.0.0.1:18999\nWEB_THREADS = "8"\nSECRET_KEY=a b\n')
    for name in ("klique-web", "klique-whatif"):
        text = (DEPLOY / f"systemd/{name}.service").read_text()
        (tmp_path / f"{name}.service").write_text(text.replace("/etc/klique/klique.env", str(env_file)))
    unit = unitrun.Unit(tmp_path / "klique-web.service", tmp_path)
    assert unit.command[:2] == ["/opt/klique/.venv/bin/gunicorn", "--config"]
    words = " ".join(unit.command)
    # the file overrides Environment=; the unit's defaults stay where the file is silent
    assert "--bind 127.0.0.1:18999 --workers 4 --worker-class gthread --threads 8 --timeout 60" in words
    assert (
        unit.env["SECRET_KEY"] == "a b" and unit.env["DJANGO_SETTINGS_MODULE"] == "klique.settings.production"
    )
    assert (unit.user, unit.cwd, unit.stop_s) == ("klique", "/opt/klique", 40.0)
    whatif = unitrun.Unit(tmp_path / "klique-whatif.service", tmp_path)
    assert f"--hostname whatif@{socket.gethostname()}" in " ".join(whatif.command)  # %H


@pytest.mark.install
@pytest.mark.postgres
@pytest.mark.redis
def test_install_then_upgrade_end_to_end():
    db = settings.DATABASES["default"]
    server = f"postgres://{db['USER'] or 'postgres'}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in {"DATABASE_URL", "REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }
    env |= {
        "CHECK_INSTALL_SERVER": server,
        "CHECK_INSTALL_DB": db["NAME"].removeprefix("test_") + "_install",
        "CHECK_INSTALL_PORT": str(port),
    }
    done = subprocess.run(
        [DEPLOY / "check-install.sh"], cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-6000:]
    out = done.stdout
    assert "the estate of deploy/estate.example.yaml exists" in out
    assert "admin 'it' logged in through the admin's form" in out
    assert "upgrade kept every row" in out and "check-install: passed" in out
