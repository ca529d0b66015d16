"""Run the installed systemd units' services without systemd, for hosts and CI jobs where systemd is
not PID 1 (deploy/install.sh --start, deploy/upgrade.sh --no-systemd, deploy/check-install.sh):

    python3 deploy/unitrun.py start|stop|status --run-dir DIR UNIT_FILE...

Each unit's ``[Service]`` is read as systemd reads it: ``Environment=`` and then
``EnvironmentFile=`` (which overrides it; deploy/with_env.py), ``WorkingDirectory=``, ``User=``
and ``Group=`` (applied when run as root), ``ExecStart=`` with ``${VAR}`` (one word) and ``$VAR``
(split into words) expanded and ``%H``/``%%`` replaced, ``TimeoutStopSec=``. ``start`` runs
ExecStart in a session of its own, its output appended to ``DIR/<unit>.log`` and its pid in
``DIR/<unit>.pid``; ``stop`` sends SIGTERM to that session, then SIGKILL after TimeoutStopSec;
``status`` exits 3 when one is not running. Standard library only.
"""

import argparse
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import with_env  # noqa: E402

BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"}


def service_section(path: Path) -> list[tuple[str, str]]:
    """The (key, value) lines of a unit's [Service] section, continuation lines joined."""
    items, section, pending = [], "", ""
    for raw in path.read_text().splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line:
            key, value = line.split("=", 1)
            items.append((key.strip(), value.strip()))
    return items


def specifiers(text: str) -> str:
    return text.replace("%%", "\0").replace("%H", socket.gethostname()).replace("\0", "%")


def expand(command: str, env: dict[str, str]) -> list[str]:
    """ExecStart's words with systemd's variable expansion."""
    words = []
    for word in shlex.split(specifiers(command)):
        if re.fullmatch(r"\$[A-Za-z_][A-Za-z0-9_]*", word):
            words.extend(env.get(word[1:], "").split())
        else:
            words.append(re.sub(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}", lambda m: env.get(m.group(1), ""), word))
    return words


class Unit:
    def __init__(self, path: Path, run_dir: Path):
        self.name = path.name.removesuffix(".service")
        self.pid_file = run_dir / f"{self.name}.pid"
        self.log_file = run_dir / f"{self.name}.log"
        self.env = dict(BASE_ENV)
        from_files: dict[str, str] = {}
        self.cwd, self.user, self.group, self.stop_s, command = None, None, None, 90.0, ""
        for key, value in service_section(path):
            if key == "Environment":
                for item in shlex.split(specifiers(value)):
                    name, _, setting = item.partition("=")
                    self.env[name] = setting
            elif key == "EnvironmentFile":
                optional = value.startswith("-")
                file = value.lstrip("-")
                if os.path.exists(file) or not optional:
                    from_files.update(with_env.load(file))
            elif key == "WorkingDirectory":
                self.cwd = value
            elif key in ("User", "Group"):
                setattr(self, key.lower(), value)
            elif key == "TimeoutStopSec":
                self.stop_s = float(value.rstrip("s"))
            elif key == "ExecStart":
                command = value.lstrip("@-:+!")
        self.env.update(from_files)
        self.command = expand(command, self.env)

    def pid(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text())
            os.kill(pid, 0)
            return pid
        except (FileNotFoundError, ValueError, ProcessLookupError):
            return None

    def start(self) -> None:
        if self.pid():
            print(f"{self.name}: already running (pid {self.pid()})")
            return
        as_user = {}
        if os.geteuid() == 0 and self.user not in (None, "root"):
            as_user = {"user": self.user, "group": self.group or self.user}
        with open(self.log_file, "ab") as log:
            process = subprocess.Popen(
                self.command,
                cwd=self.cwd,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                **as_user,
            )
        self.pid_file.write_text(str(process.pid))
        print(f"{self.name}: started (pid {process.pid}): {shlex.join(self.command)}")

    def stop(self) -> None:
        pid = self.pid()
        if pid is None:
            print(f"{self.name}: not running")
            return
        os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_s
        while time.monotonic() < deadline and self.alive(pid):
            time.sleep(0.2)
        if self.alive(pid):
            os.killpg(pid, signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        print(f"{self.name}: stopped")

    @staticmethod
    def alive(pid: int) -> bool:
        """Whether a process of the session ``pid`` leads is running (zombies do not count)."""
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z" and int(fields[3]) == pid:  # state, ppid, pgrp, session
                return True
        return False


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("--run-dir", required=True, type=Path, help="pid and log files")
    parser.add_argument("units", nargs="+", type=Path)
    args = parser.parse_args(argv)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    down = 0
    for unit in (Unit(path, args.run_dir) for path in args.units):
        if args.action == "status":
            pid = unit.pid()
            print(f"{unit.name}: {f'running (pid {pid})' if pid else 'not running'}")
            down += pid is None
        else:
            getattr(unit, args.action)()
    return 3 if down else 0


if __name__ == "__main__":
    sys.exit(main())
