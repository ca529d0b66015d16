"""A real Docker API for Docker mode's tests: Podman's service started by deploy/docker-dev/start.sh
in a folder of this test session (its own image store, with the tiny image ``IMAGE``), stopped at
the end. Without Podman the tests skip with the reason (fail when CI is set)."""

import itertools
import shutil
import subprocess
from pathlib import Path

import docker
import pytest

from klique.worker.docker.containers import WORKER
from klique.worker.docker.runner import DockerRunner
from tests.conftest import _fail_or_skip

IMAGE = "localhost/klique-busybox:dev"
SCRIPTS = Path(__file__).resolve().parents[2] / "deploy" / "docker-dev"
tags = itertools.count(1)


@pytest.fixture(scope="session")
def docker_host(tmp_path_factory):
    """``unix://.../podman.sock`` of a Podman service for this session."""
    if not shutil.which("podman"):
        _fail_or_skip("needs Podman: apt-get install podman runc catatonit busybox-static")
    folder = tmp_path_factory.mktemp("podman")
    started = subprocess.run(
        [SCRIPTS / "start.sh", folder], capture_output=True, text=True, timeout=120, check=False
    )
    assert started.returncode == 0, started.stderr
    yield started.stdout.strip().rpartition("DOCKER_HOST=")[2]
    subprocess.run([SCRIPTS / "stop.sh", folder], capture_output=True, timeout=120, check=False)


@pytest.fixture
def docker_client(docker_host):
    client = docker.DockerClient(base_url=docker_host, version="auto", timeout=60)
    yield client
    client.close()


@pytest.fixture
def make_runner(docker_client, tmp_path):
    """A DockerRunner on the session's Podman with a tag of its own; its containers are removed
    after the test."""
    made = []

    def make(tag: str | None = None, **options) -> DockerRunner:
        options.setdefault("gpus", "none")
        options.setdefault("image", IMAGE)
        tag = tag or f"test-{next(tags)}-{tmp_path.name}"
        runner = DockerRunner(docker_client, tmp_path / "checkpoints", tag=tag, **options)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        for item in docker_client.api.containers(all=True, filters={"label": [f"{WORKER}={runner.tag}"]}):
            docker_client.api.remove_container(item["Id"], force=True)
        runner.background.shutdown(wait=False)
