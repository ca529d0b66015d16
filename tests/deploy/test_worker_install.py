"""A worker host installs alone: ``pip install "klique[worker]"`` (not editable) into a fresh virtual
environment pulls neither Django, Celery nor psycopg, its ``klique`` and ``klique-worker`` commands
run, and that installed daemon enrols with a live control plane, claims a placed task and runs it
to exit 0. The ``kubernetes``, ``docker`` and ``mcp`` extras install without Django too, and the
``server`` extra alone runs the control plane (no worker mode's or test tools needed).

Needs the package registry (pip's own cache makes later runs quicker; the three installs run at
once); without it the tests skip, and with ``CI`` set they fail. The wheel is built from a copy of
the checkout's packaged files, so that setuptools' ``build/`` folder never lands in the checkout
(where a stale one would ship deleted modules).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from decimal import Decimal
from fnmatch import fnmatch
from pathlib import Path

import pytest
from django.utils import timezone

from apps.pools import services as pools
from apps.pools.models import EnrolmentToken
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from tests.conftest import _fail_or_skip
from tests.factories import ComputeResourceFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parents[2]
SERVER_ONLY = {"django", "celery", "psycopg", "psycopg-binary", "django-allauth", "plotly", "openpyxl"}
EXTRA_MODULES = {
    "klique.worker.kubernetes",
    "klique.worker.kube_nodes",
    "klique.worker.docker",
    "klique.client.mcp_server",
}
# Importing every module of both packages in a venv, and which Django-side modules got loaded.
IMPORT_ALL = """
import importlib, json, pkgutil, sys
import klique.client, klique.worker
missing = {}
for package in (klique.worker, klique.client):
    for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
        try:
            importlib.import_module(module.name)
        except ModuleNotFoundError as error:
            missing[module.name] = error.name
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"django", "celery", "psycopg", "rest_framework"})
print(json.dumps({"missing": missing, "loaded": loaded, "file": klique.worker.__file__}))
"""


class Venv:
    """A fresh virtual environment under ``folder`` with Klique's wheel and ``extras`` installing
    into it in the background (the installs of the module run at once: they wait on the network);
    ``ready()`` waits for its install. Its commands run outside the checkout. It has no pip of its
    own (``--without-pip`` saves seconds): this checkout's pip installs into it with ``--python``,
    resolving exactly as the venv's own pip would."""

    def __init__(self, folder: Path, wheel: Path, extras: str):
        self.folder = folder
        self.bin = folder / "venv" / "bin"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if k not in {"PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"} and not k.startswith(("DJANGO", "KLIQUE"))
        }
        self.env["PATH"] = f"{self.bin}:/usr/bin:/bin"
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder / "venv")], check=True)
        self.installing = subprocess.Popen(
            self.pip_command("install", "--quiet", "--no-compile", f"{wheel}[{extras}]"),
            cwd=folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def ready(self) -> "Venv":
        output, _ = self.installing.communicate(timeout=900)
        assert self.installing.returncode == 0, output
        return self

    def pip_command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "pip", "--python", str(self.bin / "python"), *args]

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        return self.execute(self.pip_command(*args))

    def run(self, *args: str, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess:
        """Run a command of the venv (``python``, ``klique-worker``...)."""
        return self.execute([str(self.bin / args[0]), *args[1:]], cwd, env)

    def execute(self, command: list[str], cwd: Path | None = None, env: dict | None = None):
        return subprocess.run(
            command,
            cwd=cwd or self.folder,
            env=self.env | (env or {}),
            capture_output=True,
            text=True,
            timeout=300,
        )

    def packages(self) -> set[str]:
        done = self.pip("list", "--format", "json")
        assert done.returncode == 0, done.stderr
        return {p["name"].lower() for p in json.loads(done.stdout)}

    def import_all(self) -> dict:
        done = self.run("python", "-c", IMPORT_ALL)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def packaged_copy(folder: Path) -> Path:
    """The files setuptools builds the distribution from: pyproject.toml, README.md and the
    top-level packages that pyproject's ``packages.find`` includes."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    folder.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, folder / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for path in ROOT.iterdir():
        if path.is_dir() and (path / "__init__.py").exists() and any(fnmatch(path.name, p) for p in include):
            shutil.copytree(path, folder / path.name, ignore=ignore)
    return folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """Klique's wheel, built once from a copy of the checkout (the registry gives setuptools)."""
    folder = tmp_path_factory.mktemp("build")
    source = packaged_copy(folder / "klique")
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(folder), str(source)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode:
        probe = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(folder), "setuptools>=69"]
        if subprocess.run(probe, capture_output=True, timeout=300).returncode:
            _fail_or_skip(f"the package registry is not reachable: {done.stderr.strip()[-500:]}")
    assert done.returncode == 0, done.stdout + done.stderr
    (built,) = folder.glob("klique-*.whl")
    return built


@pytest.fixture(scope="module")
def hosts(tmp_path_factory, wheel) -> dict[str, Venv]:
    """A worker host, a worker host with every mode's extra and a control-plane host, installing."""
    extras = {"worker": "worker", "every-mode": "worker,kubernetes,docker,mcp", "server": "server"}
    return {name: Venv(tmp_path_factory.mktemp(name), wheel, extra) for name, extra in extras.items()}


@pytest.fixture
def worker_venv(hosts) -> Venv:
    return hosts["worker"].ready()


def test_the_worker_extra_installs_without_django_celery_or_psycopg(worker_venv):
    installed = worker_venv.packages()
    assert "klique" in installed and {"httpx", "nvidia-ml-py"} <= installed
    assert not installed & SERVER_ONLY, installed & SERVER_ONLY
    assert not installed & {"kubernetes", "docker", "mcp"}, "extras stay out of the base"
    assert worker_venv.run("python", "-c", "import django").returncode != 0

    imported = worker_venv.import_all()
    assert imported["loaded"] == [], "klique.worker or klique.client imported Django-side packages"
    assert imported["file"].startswith(str(worker_venv.folder / "venv")), "not the installed copy"
    assert set(imported["missing"]) <= EXTRA_MODULES, "only a mode's own module needs its extra"


def test_the_installed_commands_answer_help(worker_venv):
    for command in ("klique-worker", "klique"):
        done = worker_venv.run(command, "--help")
        assert done.returncode == 0, done.stderr
        assert f"usage: {command}" in done.stdout


def test_a_mode_or_command_whose_extra_is_missing_names_the_extra_to_install(worker_venv):
    for mode in ("kubernetes", "docker"):
        args = ["--mode", mode, "--server", "http://127.0.0.1:9", "--enrolment-token", "kqe_x", "--gpus", "1"]
        done = worker_venv.run("klique-worker", *args, "--state-dir", str(worker_venv.folder / mode))
        assert done.returncode != 0 and f"pip install 'klique[{mode}]'" in done.stderr, done.stderr
    done = worker_venv.run("klique", "mcp")
    assert done.returncode == 2 and "pip install 'klique[mcp]'" in done.stderr, done.stderr


@pytest.mark.django_db(transaction=True)
def test_the_installed_worker_enrols_claims_and_runs_a_task_to_exit_0(worker_venv, live_server, settings):
    settings.WORKER_HEARTBEAT_S = 0.5
    pool = PoolFactory(name="gpu-host", capacity=Decimal("1"))
    token = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="install"), now=timezone.now())
    profile = ProfileFactory(gpus=Decimal("1"))
    profile.pools.add(pool)
    resource = ComputeResourceFactory(profile=profile)
    task = lifecycle.submit(
        user=UserFactory(), compute_resource=resource, command='echo "ran $KLIQUE_TASK_ID"; exit 0'
    )
    lifecycle.place_many([(Task.objects.get(pk=task.pk), pool)], timezone.now())

    state = worker_venv.folder / "state"
    args = [str(worker_venv.bin / "klique-worker"), "--server", live_server.url, "--gpus", "1"]
    args += ["--hostname", "fresh-host", "--state-dir", str(state)]
    args += ["--poll-min", "0.2", "--poll-max", "1", "--retry-max", "1", "--tick", "0.1"]
    log = worker_venv.folder / "worker.log"
    daemon = subprocess.Popen(
        args,
        cwd=worker_venv.folder,
        env=worker_venv.env | {"KLIQUE_ENROLMENT_TOKEN": token},
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while Task.objects.get(pk=task.pk).state not in {Task.State.SUCCEEDED, Task.State.FAILED}:
            assert daemon.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()

    done = Task.objects.get(pk=task.pk)
    assert (done.state, done.exit_code) == (Task.State.SUCCEEDED, 0), log.read_text()
    assert done.worker.hostname == "fresh-host"
    assert (state / "tasks" / str(task.pk) / "output.log").read_text().strip() == f"ran {task.pk}"


def test_the_kubernetes_docker_and_mcp_extras_install_without_django(hosts):
    venv = hosts["every-mode"].ready()
    installed = venv.packages()
    assert {"kubernetes", "docker", "mcp"} <= installed
    assert not installed & SERVER_ONLY, installed & SERVER_ONLY
    imported = venv.import_all()
    assert imported["missing"] == {} and imported["loaded"] == [], imported
    assert venv.pip("check").returncode == 0


def test_the_server_extra_alone_runs_the_control_plane(hosts, tmp_path):
    venv = hosts["server"].ready()
    installed = venv.packages()
    assert {"django", "celery", "gunicorn"} <= installed
    assert not installed & {"kubernetes", "docker", "mcp", "pytest"}, "no worker mode's or test extra"
    database = {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}"}
    for command in (["manage.py", "check"], ["manage.py", "migrate", "--no-input", "-v0"]):
        done = venv.run("python", *command, cwd=ROOT, **database)
        assert done.returncode == 0, done.stderr
    done = venv.run("celery", "-A", "klique", "report", cwd=ROOT, **database)
    assert done.returncode == 0 and "celery:" in done.stdout, done.stderr
