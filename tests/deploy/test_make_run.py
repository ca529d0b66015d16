"""`make run` as a person runs it (the README's command), in a copy of the tree: it serves the
portal and the session gateway, and Ctrl-C (SIGINT to the terminal's process group) stops the
portal, the gateway, the engine, the demo's worker daemons and the cloud nodes, printing one line
and no error of make's. How long that takes is measured in docs/benchmarks.md, not here."""

import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 300  # a failure bound, not a measure


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _copy_tree(into: Path) -> None:
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, files):
        source, target = ROOT / name.decode(), into / name.decode()
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)  # with its time: make must find the install up to date
    (into / ".venv").symlink_to(ROOT / ".venv")


def _group(pgid: int) -> list[str]:
    out = subprocess.run(["ps", "-o", "pid=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return out.split()


@pytest.mark.skipif(not (ROOT / ".venv" / ".installed").exists(), reason="needs `make install` first")
def test_make_run_serves_the_portal_and_ctrl_c_stops_everything_with_one_line(tmp_path):
    _copy_tree(tmp_path)
    port, gateway = _free_port(), _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "DJANGO_"))}
    log = open(tmp_path / "make-run.log", "wb")  # noqa: SIM115 - the child writes it
    make = subprocess.Popen(
        ["make", "run", f"PORT={port}", f"GATEWAY_PORT={gateway}"],
        cwd=tmp_path,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/accounts/login/", timeout=5) as page:
                    if page.status == 200:
                        break
            except OSError:
                time.sleep(1)
        else:
            pytest.fail((tmp_path / "make-run.log").read_text()[-3000:])
        time.sleep(5)  # the daemons enrol and work starts
        with urllib.request.urlopen(f"http://127.0.0.1:{gateway}/healthz", timeout=5) as health:
            assert health.status == 200  # the session gateway, the demo's daemons' tunnels in it
        before = (tmp_path / "make-run.log").read_text()
        os.killpg(make.pid, signal.SIGINT)
        make.wait(timeout=WAIT_S)
        deadline = time.monotonic() + 30
        while _group(make.pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert _group(make.pid) == []
        after = (tmp_path / "make-run.log").read_text()[len(before) :]
        said = [line for line in after.splitlines() if not line[:4].isdigit()]  # log lines have times
        assert said == ["Klique: stopped"], after[-3000:]  # make prints no error of its own
        assert make.returncode in (0, -signal.SIGINT)  # make ends as interrupted, as at a terminal
    finally:
        if _group(make.pid):
            os.killpg(make.pid, signal.SIGKILL)
        subprocess.run(
            [
                str(tmp_path / ".venv" / "bin" / "python"),
                "manage.py",
                "cloud_release",
                "--all",
                "--wait",
                "5",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
        )
        log.close()
