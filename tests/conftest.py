"""Shared fixtures. Tests marked ``postgres`` or ``redis`` need the real services: without them
they skip with a reason, and when ``CI`` is set they fail instead, so CI cannot pass by skipping."""

import os

import pytest

pytest_plugins = ["tests.backend_neutral"]


def _fail_or_skip(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI is set, so this is a failure, not a skip)")
    pytest.skip(reason)


def require_postgres() -> None:
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"] != "django.db.backends.postgresql":
        _fail_or_skip("needs PostgreSQL: set DATABASE_URL=postgres://...")


def require_redis() -> None:
    from django.conf import settings

    url = settings.REDIS_URL
    if not url:
        _fail_or_skip("needs Redis: set REDIS_URL=redis://...")
    import redis

    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.RedisError as error:
        _fail_or_skip(f"Redis at {url} is not reachable: {error}")


def require_slurm() -> None:
    import shutil
    import subprocess

    if not os.environ.get("SLURM_CONF") or not shutil.which("sinfo"):
        _fail_or_skip("needs Slurm: run deploy/slurm-dev/start.sh and export the SLURM_CONF it prints")
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], capture_output=True, text=True, timeout=10)
    if done.returncode or not done.stdout.strip():
        _fail_or_skip(f"Slurm at {os.environ['SLURM_CONF']} does not answer: {done.stderr.strip()}")


def require_keycloak() -> None:
    """The realm of deploy/dev-services/keycloak answering at KEYCLOAK_URL (http://127.0.0.1:8180)."""
    from tests import keycloak

    if why := keycloak.answers():
        _fail_or_skip(f"needs Keycloak at {keycloak.URL}: run deploy/dev-services/start.sh keycloak ({why})")


@pytest.fixture
def keycloak_admin():
    """Keycloak's admin REST API on the `klique` realm (tests/keycloak.py)."""
    from tests import keycloak

    require_keycloak()
    api = keycloak.Admin()
    yield api
    api.close()


@pytest.fixture(autouse=True)
def _real_services_for_markers(request):
    if request.node.get_closest_marker("postgres"):
        require_postgres()
    if request.node.get_closest_marker("redis"):
        require_redis()
    if request.node.get_closest_marker("slurm"):
        require_slurm()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """After a run that skipped tests for want of a service, say how to run them."""
    skipped = terminalreporter.stats.get("skipped", [])
    wanting = [r for r in skipped if any(w in str(r.longrepr) for w in ("needs ", "is not installed"))]
    if not wanting:
        return
    terminalreporter.write_sep("-", "the rest of the suite")
    terminalreporter.write_line(
        f"{len(wanting)} tests skipped for want of a real service or tool (reasons above). To run them:\n"
        "  make test-services   PostgreSQL and Redis (installs them from Debian, starts them; root)\n"
        "  .ci/run              everything CI runs: also Slurm, Podman, Chromium, nginx and the deploy checks"
    )


@pytest.fixture(scope="session")
def kube_cluster(tmp_path_factory):
    """The real Kubernetes control plane of tests/kube.py, one per session (per xdist worker)."""
    from pathlib import Path

    from tests import kube

    if kubeconfig := os.environ.get("KLIQUE_TEST_KUBECONFIG"):
        cluster = kube.Cluster(Path(kubeconfig))
        cluster.install_worker_rbac()
        yield cluster
        return
    if why := kube.missing_tools():
        _fail_or_skip(why)
    cluster = kube.start(tmp_path_factory.mktemp("k8s"))
    yield cluster
    kube.stop(cluster)
