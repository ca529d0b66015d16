"""A Linux desktop in the browser, as a session kind's server (docs/sessions.md): an X server
that is its own VNC server (TigerVNC's Xvnc) listening only on a Unix socket of a private folder,
a terminal on it (xterm), and noVNC's web client with websockify on the session's port. All from
Debian's packages: ``tigervnc-standalone-server xterm novnc websockify``.

    klique-desktop --port {port} [--host {host}]

The VNC server asks no password: it listens on no TCP port, only on a Unix socket in a folder of
mode 0700, and websockify serves it on the session port, which the session tunnel reaches on
the worker's loopback (the session gateway checks the person). It runs until SIGTERM, then stops
what it started."""

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

NOVNC = "/usr/share/novnc"
NEEDED = ("Xvnc", "websockify", "xterm")
PACKAGES = ("tigervnc-standalone-server", "xterm", "novnc", "websockify")


def missing() -> list[str]:
    found = [tool for tool in NEEDED if shutil.which(tool) is None]
    return found + ([] if Path(NOVNC, "vnc.html").exists() else [f"{NOVNC}/vnc.html (novnc)"])


def display(processes: list, socket_path: Path) -> str:
    """Start Xvnc on the first free display, its VNC on ``socket_path`` only; the display's name."""
    read, write = os.pipe()
    vnc = [
        "-rfbport",
        "-1",
        "-rfbunixpath",
        str(socket_path),
        "-rfbunixmode",
        "0600",
        "-SecurityTypes",
        "None",
    ]
    screen = ["-geometry", "1280x800", "-depth", "24", "-nolisten", "tcp"]
    xvnc = subprocess.Popen(
        ["Xvnc", "-displayfd", str(write), *vnc, *screen],
        pass_fds=(write,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    processes.append(xvnc)
    os.close(write)
    with os.fdopen(read) as pipe:
        number = pipe.readline().strip()
    if not number:
        raise SystemExit("klique-desktop: Xvnc did not start")
    return f":{number}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="klique-desktop", description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True, help="the session's port (noVNC answers there)")
    parser.add_argument("--host", default="127.0.0.1", help="the address to bind (default 127.0.0.1)")
    args = parser.parse_args(argv)
    if lacking := missing():
        print(f"klique-desktop: missing {', '.join(lacking)}: install Debian's {' '.join(PACKAGES)}")
        return 2
    folder = Path(tempfile.mkdtemp(prefix="klique-desktop-", dir=os.environ.get("TMPDIR")))
    folder.chmod(0o700)
    socket_path = folder / "vnc.sock"
    processes: list[subprocess.Popen] = []
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    try:
        env = {**os.environ, "DISPLAY": display(processes, socket_path)}
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        processes.append(subprocess.Popen(["xterm", "-geometry", "120x40+20+20"], env=env, **quiet))
        web = ["websockify", "--web", NOVNC, f"--unix-target={socket_path}", f"{args.host}:{args.port}"]
        processes.append(subprocess.Popen(web, stdout=sys.stdout, stderr=sys.stderr))
        while not stopping and all(process.poll() is None for process in processes):
            time.sleep(0.5)
        return 0 if stopping else 1
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.terminate()
        for process in processes:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
