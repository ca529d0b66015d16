"""How long `make run` takes from a fresh clone to the portal's first page (docs/benchmarks.md,
"Start-up").

It puts the checkout in a temporary folder (``--ref REF``: a ``git clone`` at that commit; by
default the working tree's files, as a clone of this tree with its changes would hold them), runs
``make run PORT=<a free port>`` there, as a person would, with pip's and uv's caches empty (a
fresh machine; ``--warm-caches`` keeps this user's), stamps each line make prints, and polls
the login page until it answers 200. Then it sends Ctrl-C (SIGINT to make's process group, as a
terminal does) and waits for everything to stop. It prints each phase (from one recipe line make
echoes to the next: the virtual environment, the installer, the packages, migrate, seed, the
servers' start to the first page), the total, Ctrl-C to stopped, and the machine's load.

    .venv/bin/python bench/start_time.py                 # this tree, fresh caches
    .venv/bin/python bench/start_time.py --ref HEAD~1    # a commit, for a before figure
    .venv/bin/python bench/start_time.py --smoke         # CI: this checkout's .venv, linked in

``--smoke`` (tests/bench/test_start_time.py) links this checkout's installed ``.venv`` into the
copy, so make finds the install done and only migrates, seeds and serves; it exits 1 unless the
first page answered 200 and Ctrl-C printed ``Klique: stopped``.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The recipe lines that start a phase, in the order make echoes them (the Makefile's, before and
# after the uv install); a line that starts several phases at once names them together.
MARKERS = [
    ("venv", re.compile(r"-m venv\b|\buv venv\b")),
    ("uv into .venv", re.compile(r"install (--quiet )?uv$")),
    ("pip upgrade", re.compile(r"pip install .*--upgrade pip$")),
    ("packages", re.compile(r"pip install .*-e \"?\.\[")),
    ("migrate", re.compile(r"manage\.py migrate|\('migrate'")),
    ("seed", re.compile(r"manage\.py seed_demo|\('seed_demo'")),
    ("servers start", re.compile(r"^Klique: portal ")),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def copy_tree(into: Path, ref: str | None, link_venv: bool) -> None:
    if ref:
        subprocess.run(["git", "clone", "-q", str(ROOT), str(into)], check=True)
        subprocess.run(["git", "-C", str(into), "checkout", "-q", ref], check=True)
        return
    names = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    for name in filter(None, names):
        source, target = ROOT / name.decode(), into / name.decode()
        if source.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)  # with its time: make must find a linked install up to date
    if link_venv:
        (into / ".venv").symlink_to(ROOT / ".venv")


class Stamped:
    """make's output, each line with the seconds since make started; read on a thread of its own."""

    def __init__(self, stream, log_path: Path, started: float):
        self.lines: list[tuple[float, str]] = []
        self.started = started
        self.log = open(log_path, "w")  # noqa: SIM115 - closed when the stream ends
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream) -> None:
        for raw in stream:
            line = raw.decode(errors="replace").rstrip("\n")
            at = time.monotonic() - self.started
            self.lines.append((at, line))
            self.log.write(f"{at:7.1f} {line}\n")
            self.log.flush()
        self.log.close()

    def text(self, since: int = 0) -> str:
        return "\n".join(line for _, line in self.lines[since:])


def phases(lines: list[tuple[float, str]], first_page_s: float) -> list[tuple[str, float]]:
    """(phase, seconds) from the first line of each marker to the next phase's, the last to the page."""
    starts: list[tuple[float, list[str]]] = []
    seen: set[str] = set()
    for at, line in lines:
        names = [name for name, pattern in MARKERS if name not in seen and pattern.search(line.strip())]
        if names:
            seen.update(names)
            starts.append((at, names))
    ends = [at for at, _ in starts[1:]] + [first_page_s]
    return [(" + ".join(names), end - at) for (at, names), end in zip(starts, ends, strict=True)]


def wait_for_page(url: str, make: subprocess.Popen, timeout_s: float) -> float | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and make.poll() is None:
        try:
            with urllib.request.urlopen(url, timeout=5) as page:
                if page.status == 200:
                    return time.monotonic()
        except OSError:
            time.sleep(0.25)
    return None


def group_alive(pgid: int) -> bool:
    out = subprocess.run(["ps", "-o", "pid=", "-g", str(pgid)], capture_output=True, text=True).stdout
    return bool(out.split())


def left_running(tree: Path) -> list[int]:
    """Processes still working in the copy (demo tasks and cloud nodes run in sessions of their own)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or int(proc.name) == os.getpid():
            continue
        try:
            where = os.readlink(proc / "cwd") + " " + (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(tree) in where:
            found.append(int(proc.name))
    return found


def run(args) -> dict:
    work = Path(tempfile.mkdtemp(prefix="klique-start-"))
    tree = work / "klique"
    tree.mkdir()
    copy_tree(tree, args.ref, link_venv=args.smoke)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DATABASE_URL", "REDIS_URL", "DJANGO_"))}
    if not (args.warm_caches or args.smoke):
        env |= {"PIP_CACHE_DIR": str(work / "cache" / "pip"), "UV_CACHE_DIR": str(work / "cache" / "uv")}
    port = free_port()
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    make = subprocess.Popen(
        ["make", "run", f"PORT={port}", f"GATEWAY_PORT={free_port()}"],
        cwd=tree,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    out = Stamped(make.stdout, work / "make-run.log", started)
    result = {"tree": "this checkout's .venv linked" if args.smoke else (args.ref or "working tree")}
    try:
        page_at = wait_for_page(f"http://127.0.0.1:{port}/accounts/login/", make, args.timeout)
        result["load_1min_before"] = round(load_before, 2)
        result["load_1min_at_first_page"] = round(os.getloadavg()[0], 2)
        if page_at is None:
            result["error"] = "no first page: " + out.text()[-3000:]
            return result
        result["first_page_s"] = round(page_at - started, 1)
        result["phases"] = [(name, round(s, 1)) for name, s in phases(out.lines, page_at - started)]
        time.sleep(args.settle)
        before = len(out.lines)
        interrupted = time.monotonic()
        os.killpg(make.pid, signal.SIGINT)
        make.wait(timeout=120)
        result["ctrl_c_make_exit_s"] = round(time.monotonic() - interrupted, 1)
        deadline = time.monotonic() + 30
        while group_alive(make.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        result["ctrl_c_all_stopped_s"] = round(time.monotonic() - interrupted, 1)
        result["left_running"] = len(left_running(tree))
        out.thread.join(timeout=5)
        result["said_after_ctrl_c"] = [
            line for line in out.text(before).splitlines() if not line[:4].isdigit()
        ]
        return result
    finally:
        if group_alive(make.pid):
            os.killpg(make.pid, signal.SIGKILL)
        python = tree / ".venv" / "bin" / "python"
        if python.exists():
            release = [str(python), "manage.py", "cloud_release", "--all", "--wait", "5"]
            subprocess.run(release, cwd=tree, env=env, capture_output=True)
        for pid in left_running(tree):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        print(f"make's output, stamped: {work / 'make-run.log'}", file=sys.stderr)
        if not args.keep:
            shutil.rmtree(tree, ignore_errors=True)
            shutil.rmtree(work / "cache", ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--ref", help="git clone this commit instead of copying the working tree")
    parser.add_argument("--smoke", action="store_true", help="link this checkout's installed .venv in")
    parser.add_argument("--warm-caches", action="store_true", help="pip's and uv's caches as they are")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the first page")
    parser.add_argument("--settle", type=float, default=5, help="seconds of demo before Ctrl-C")
    parser.add_argument("--keep", action="store_true", help="keep the temporary checkout")
    args = parser.parse_args()
    if args.smoke and args.ref:
        parser.error("--smoke runs the working tree with its .venv")
    if args.smoke and not (ROOT / ".venv" / ".installed").exists():
        sys.exit("--smoke needs this checkout installed first (make install)")
    result = run(args)
    print(
        f"`make run` from {result['tree']}, load {result['load_1min_before']} before, "
        f"{result['load_1min_at_first_page']} at the first page ({os.cpu_count()} CPUs)"
    )
    print("| phase | s |\n|---|---|")
    for name, seconds in result.get("phases", []):
        print(f"| {name} | {seconds} |")
    print(f"| **to the first page** | **{result.get('first_page_s', '-')}** |")
    if "ctrl_c_all_stopped_s" in result:
        print(
            f"Ctrl-C: make exited in {result['ctrl_c_make_exit_s']} s, everything stopped in "
            f"{result['ctrl_c_all_stopped_s']} s, saying {result['said_after_ctrl_c']}; "
            f"{result['left_running']} process(es) left running in the copy"
        )
    print(json.dumps(result))
    if "error" in result or result.get("said_after_ctrl_c") != ["Klique: stopped"]:
        print(result.get("error", "Ctrl-C did not print exactly 'Klique: stopped'"), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
