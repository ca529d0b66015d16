"""Production serves itself: under ``klique.settings.production`` a real gunicorn serves the static
files collected by ``collectstatic`` (whitenoise: hashed names, brotli and gzip, a year's cache),
redirects plain HTTP to HTTPS but not its probes, and ``check --deploy`` finds nothing to warn of."""

import os
import re
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from klique.settings.base import BASE_DIR

HOST = "klique.example.org"
HTTPS = {"Host": HOST, "X-Forwarded-Proto": "https"}


def production_env(tmp_path: Path, **extra) -> dict:
    return (
        {
            k: v
            for k, v in os.environ.items()
            if k not in {"DEBUG", "REDIS_URL", "DATABASE_URL", "STATIC_ROOT"}
        }
        | {
            "DJANGO_SETTINGS_MODULE": "klique.settings.production",
            "SECRET_KEY": secrets.token_urlsafe(50),
            "ALLOWED_HOSTS": HOST,
            "DATABASE_URL": f"sqlite:///{tmp_path / 'unused.sqlite3'}",
            "STATIC_ROOT": str(tmp_path / "static"),
            "LOG_LEVEL": "WARNING",
        }
        | extra
    )


def manage(env: dict, *args: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "manage.py", *args]
    return subprocess.run(command, cwd=BASE_DIR, env=env, capture_output=True, text=True, timeout=600)


@pytest.mark.parametrize("redis", [False, True], ids=["without-redis", "with-redis"])
def test_check_deploy_with_production_settings_prints_no_warning(tmp_path, redis):
    env = production_env(tmp_path, **({"REDIS_URL": "redis://127.0.0.1:6379/0"} if redis else {}))
    done = manage(env, "check", "--deploy", "--fail-level", "WARNING")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "System check identified no issues" in done.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gunicorn(tmp_path_factory):
    """collectstatic into a temporary STATIC_ROOT, then gunicorn on it; yields its base URL."""
    tmp_path = tmp_path_factory.mktemp("production")
    env = production_env(tmp_path)
    collected = manage(env, "collectstatic", "--no-input")
    assert collected.returncode == 0, collected.stderr
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "klique.wsgi:application", "--bind", f"127.0.0.1:{port}"]
        + ["--workers", "2", "--log-level", "warning"],
        cwd=BASE_DIR,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120  # a bound on a loaded machine, not a measured wait
    while True:
        assert server.poll() is None, "gunicorn exited"
        try:
            if httpx.get(f"{url}/admin/login/", headers=HTTPS, timeout=5).status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "gunicorn did not answer"
        time.sleep(0.2)
    yield url, tmp_path / "static"
    server.terminate()
    server.wait(timeout=30)


def test_a_real_page_links_hashed_static_files_served_compressed_and_cached_for_a_year(gunicorn):
    url, _ = gunicorn
    page = httpx.get(f"{url}/admin/login/", headers=HTTPS)
    assert page.status_code == 200
    assert "script-src 'self'" in page.headers["content-security-policy"]
    assert page.headers["strict-transport-security"].startswith("max-age=31536000")
    css = re.search(r'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', page.text).group(1)
    for encoding in ("br", "gzip"):
        answer = httpx.get(url + css, headers=HTTPS | {"Accept-Encoding": encoding})
        assert answer.status_code == 200 and answer.headers["content-encoding"] == encoding
        assert "immutable" in answer.headers["cache-control"]
        assert "max-age=315360000" in answer.headers["cache-control"]
        assert answer.headers["vary"] == "Accept-Encoding"
        assert "body" in answer.text


def test_the_vendored_plotly_is_served_by_its_name_and_its_hashed_name(gunicorn):
    url, static_root = gunicorn
    original = (Path(BASE_DIR) / "static/vendor/plotly.min.js").read_bytes()
    hashed = next(static_root.glob("vendor/plotly.min.*.js")).name
    for name in ("plotly.min.js", hashed):
        answer = httpx.get(f"{url}/static/vendor/{name}", headers=HTTPS | {"Accept-Encoding": "gzip"})
        assert answer.status_code == 200 and answer.headers["content-encoding"] == "gzip"
        assert answer.content == original  # decompressed by httpx
        assert int(answer.headers["content-length"]) < len(original) / 2


def test_plain_http_is_redirected_to_https_but_the_probes_are_not(gunicorn):
    url, _ = gunicorn
    page = httpx.get(f"{url}/admin/login/", headers={"Host": HOST})
    assert page.status_code == 301 and page.headers["location"] == f"https://{HOST}/admin/login/"
    assert httpx.get(f"{url}/healthz", headers={"Host": "10.0.0.5"}).status_code == 200
