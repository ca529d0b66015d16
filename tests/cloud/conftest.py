"""moto's standalone EC2-compatible server, one per test session on a free port: boto3 makes real
HTTP calls to it. Each test uses pools of its own, so the tests share the server."""

import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def moto_endpoint():
    pytest.importorskip("moto", reason="needs moto's server: pip install 'moto[server]>=5'")
    pytest.importorskip("boto3", reason="needs boto3: pip install 'boto3>=1.34'")
    beside = Path(sys.executable).with_name("moto_server")
    command = str(beside) if beside.exists() else shutil.which("moto_server")
    if not command:
        pytest.skip("moto is installed without its server: pip install 'moto[server]>=5'")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [command, "-H", "127.0.0.1", "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{url}/moto-api/", timeout=2).read()
            break
        except OSError as error:
            if server.poll() is not None:
                pytest.fail(f"moto_server exited: {server.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                server.kill()
                pytest.fail(f"moto_server did not answer on {url}: {error}")
            time.sleep(0.2)
    yield url
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
