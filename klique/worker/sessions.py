"""Sessions (a Jupyter server, an IDE server on a port) run by the daemon as tasks: the command it
builds for a session task, whether the server answers yet, and what it measures for the control
plane's idle limits.

A claimed task with a ``session`` object is a session: the daemon picks a free port on the
session host, runs the server through the same runner as any task (same GPUs, same stop)
(``Sessions.start``), polls it until it answers and reports its URL, and from its start, every
``sample_s``, its activity in the heartbeat (``Sessions.watch``, ``Session.report``): a server
that never answers is measured too, reported with ``ready`` false. The control plane decides when
a session is idle and stops it. A failure probing or measuring one session is logged and that
session reported with nulls; it never stops the daemon's loop.

The server is asked whether it answers in session_probes.py and measured in session_metrics.py.
"""

import importlib.util
import logging
import math
import os
import re
import shlex
import shutil
import socket
import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from klique.tunnel.routes import Route
from klique.worker.runs import StartFailed
from klique.worker.session_metrics import CpuMeter, established, gpu_utilisation, session_processes
from klique.worker.session_probes import answers, jupyter_status

log = logging.getLogger("klique.worker")

JUPYTER, PORT = "jupyter", "port"
KINDS = (JUPYTER, PORT)
DEFAULT_SAMPLE_S = 15.0
MIN_SAMPLE_S = 1.0
PROBE_EVERY_S = 0.5
BASE_URL = re.compile(r"^/([A-Za-z0-9._~-]+/)*$")
PATH = re.compile(r"^/[A-Za-z0-9._~/?=&%-]*$")
WILDCARDS = {"", "0.0.0.0", "::"}


class SessionError(ValueError):
    """The claimed ``session`` object cannot be run as asked (a bad kind, command, base URL)."""


@dataclass(frozen=True)
class SessionSpec:
    """The ``session`` object of a claimed task, checked."""

    kind: str
    token: str
    base_url: str
    ready_path: str
    command: tuple[str, ...] = ()
    sample_s: float = DEFAULT_SAMPLE_S
    strip_base_url: bool = False  # the server serves at /: the tunnel takes the base URL off

    @classmethod
    def parse(cls, raw) -> "SessionSpec":
        if not isinstance(raw, dict):
            raise SessionError("session is not an object")
        kind = raw.get("kind")
        if kind not in KINDS:
            raise SessionError(f"session kind {kind!r} is not one of {', '.join(KINDS)}")
        token = raw.get("token")
        if not isinstance(token, str) or not token or any(c.isspace() for c in token):
            raise SessionError("session token is missing or holds spaces")
        base_url = raw.get("base_url") or "/"
        if not isinstance(base_url, str) or not BASE_URL.match(base_url):
            raise SessionError(f"session base_url {base_url!r} is not a path like /sessions/12/")
        ready_path = raw.get("ready_path") or ("/api/status" if kind == JUPYTER else "/")
        if not isinstance(ready_path, str) or not PATH.match(ready_path):
            raise SessionError(f"session ready_path {ready_path!r} is not a path")
        command = raw.get("command") or []
        if kind == PORT:
            if not isinstance(command, list) or not command or not all(isinstance(a, str) for a in command):
                raise SessionError("a port session needs command: a non-empty list of strings")
        sample_s = raw.get("sample_s", DEFAULT_SAMPLE_S)
        if isinstance(sample_s, bool) or not isinstance(sample_s, int | float) or not math.isfinite(sample_s):
            raise SessionError(f"session sample_s {sample_s!r} is not a number of seconds")
        command = tuple(command) if kind == PORT else ()
        strip = raw.get("strip_base_url", False) is True
        return cls(kind, token, base_url, ready_path, command, max(MIN_SAMPLE_S, float(sample_s)), strip)


def default_host(hostname: str) -> str:
    """The address the worker's hostname resolves to, else 127.0.0.1."""
    try:
        return socket.gethostbyname(hostname)
    except OSError:
        return "127.0.0.1"


def free_port(host: str) -> int:
    """A TCP port free on ``host`` now (the server binds it a moment later)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def url_host(host: str, hostname: str) -> str:
    """How the session is reached: its bind address, or the worker's hostname when it binds every
    address; an IPv6 address in brackets."""
    name = hostname if host in WILDCARDS else host
    return f"[{name}]" if ":" in name else name


def jupyter_launcher() -> list[str]:
    """The Jupyter server of the worker's own environment, else ``jupyter-server`` on PATH."""
    if importlib.util.find_spec("jupyter_server") is not None:
        return [sys.executable, "-m", "jupyter_server"]
    return [shutil.which("jupyter-server") or "jupyter-server"]


def argv(spec: SessionSpec, *, host: str, port: int, root_dir: Path | None, launcher=None) -> list[str]:
    """The server's command line. The Jupyter token is not on it (``ps`` shows a command line to
    every user of the host): it travels in ``JUPYTER_TOKEN``, see ``variables``."""
    if spec.kind == PORT:
        values = {"{port}": str(port), "{base_url}": spec.base_url, "{host}": host}
        command = []
        for arg in spec.command:
            for placeholder, value in values.items():
                arg = arg.replace(placeholder, value)
            command.append(arg)
        return command
    command = [
        *(launcher or jupyter_launcher()),
        "--no-browser",
        f"--ServerApp.base_url={spec.base_url}",
        f"--ServerApp.ip={host}",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",
        "--ServerApp.allow_remote_access=True",
    ]
    if root_dir is not None:
        command.append(f"--ServerApp.root_dir={root_dir}")
    if os.geteuid() == 0:
        command.append("--ServerApp.allow_root=True")
    return command


def variables(spec: SessionSpec, *, host: str, port: int, root_dir: Path | None) -> dict[str, str]:
    """What the session's processes are told: its port, token and base URL."""
    found = {
        "KLIQUE_SESSION_PORT": str(port),
        "KLIQUE_SESSION_HOST": host,
        "KLIQUE_SESSION_TOKEN": spec.token,
        "KLIQUE_SESSION_BASE_URL": spec.base_url,
    }
    if spec.kind == JUPYTER:
        found["JUPYTER_TOKEN"] = spec.token
        if root_dir is not None:
            found["JUPYTER_RUNTIME_DIR"] = str(root_dir / ".jupyter" / "runtime")
    return found


def session_task(task: dict, spec: SessionSpec, *, host: str, port: int, root_dir: Path | None) -> dict:
    """The task as the runner gets it: the server's command and the session's variables added to
    ``spec.env`` (over any of the same name)."""
    task_spec = task.get("spec") or {}
    if not isinstance(task_spec, dict):
        raise SessionError("the task's spec is not an object")
    spec_env = task_spec.get("env") or {}
    if not isinstance(spec_env, dict):
        raise SessionError("spec.env is not an object of environment variables")
    command = shlex.join(argv(spec, host=host, port=port, root_dir=root_dir))
    env = {**spec_env, **variables(spec, host=host, port=port, root_dir=root_dir)}
    return {**task, "command": f"exec {command}", "spec": {**task_spec, "env": env}}


def join(base_url: str, path: str) -> str:
    return base_url.rstrip("/") + "/" + path.lstrip("/")


def utc_iso(value) -> str | None:
    """An ISO-8601 time as UTC (``...+00:00``), or None when it cannot be read."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.fromisoformat(value)
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC).isoformat()
    except (ValueError, OverflowError):  # OverflowError: out of datetime's range once in UTC
        return None


def now_iso() -> str:
    return datetime.now(UTC).isoformat()


@dataclass
class Session:
    """A session task's server as the daemon follows it: its address, whether it answers yet and
    its latest measurements (``report``)."""

    task_id: int
    spec: SessionSpec
    host: str  # where it binds
    port: int
    public_host: str  # how it is reached (the bind address, or the hostname)
    devices: list[str] = field(default_factory=list)
    ready: bool = False
    next_probe: float = 0.0
    next_sample: float = 0.0
    cpu: CpuMeter = field(default_factory=CpuMeter)
    metrics: dict = field(default_factory=dict)
    sampled_at: str = field(default_factory=now_iso)

    @property
    def local(self) -> str:
        """Where the daemon itself reaches the server."""
        host = "127.0.0.1" if self.host in WILDCARDS else self.host
        return f"http://{url_host(host, host)}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.public_host}:{self.port}{self.spec.base_url}"

    def served(self, path: str) -> str:
        """Where the server answers ``path`` of the session: under its base URL, or at / when it
        knows no base URL."""
        return join("/" if self.spec.strip_base_url else self.spec.base_url, path)

    def route(self) -> Route:
        """How the session tunnel reaches it (klique/tunnel)."""
        token = self.spec.token if self.spec.kind == JUPYTER else ""
        return Route(self.local, self.spec.base_url, token, self.spec.strip_base_url)

    def headers(self) -> dict:
        return {"Authorization": f"token {self.spec.token}"} if self.spec.kind == JUPYTER else {}

    def probe(self, now: float) -> bool:
        """Ask the server once, at most every ``PROBE_EVERY_S``; True when it has just come up (it
        is then measured at once)."""
        if self.ready or now < self.next_probe:
            return False
        self.next_probe = now + PROBE_EVERY_S
        if not answers(self.local + self.served(self.spec.ready_path), self.headers()):
            return False
        self.ready, self.next_sample = True, now
        return True

    def sample(self, now: float, root_pid: int | None, nvml=None, moved: int | None = None) -> bool:
        """Measure, from the start and then every ``sample_s``, whether it answers yet or not;
        True when it did. The first sample starts the CPU count (its ``cpu_percent`` is None).
        ``moved``: the bytes it has moved through the session tunnel (its network activity)."""
        if now < self.next_sample:
            return False
        self.next_sample = now + self.spec.sample_s
        # Connections first: the status request below must not count as a client.
        metrics = {
            "connections": established(self.port),
            "cpu_percent": self.cpu.sample(session_processes(root_pid)) if root_pid else None,
            "gpu_util": gpu_utilisation(nvml, self.devices),
            "net_bytes": moved,
            "last_activity": None,
        }
        if self.spec.kind == JUPYTER and self.ready:
            status = jupyter_status(self.local + join(self.spec.base_url, "api/status"), self.spec.token)
            if status is not None:
                metrics["last_activity"] = utc_iso(status.get("last_activity"))
                metrics["kernels"] = _count(status.get("kernels"))
                metrics["kernel_connections"] = _count(status.get("connections"))
        self.metrics, self.sampled_at = metrics, now_iso()
        return True

    def unknown(self) -> None:
        """Measuring failed: report nothing known rather than stale values."""
        self.metrics, self.sampled_at = {}, now_iso()

    def report(self) -> dict:
        """The session's entry in the heartbeat's ``sessions``."""
        return {
            "url": self.url if self.ready else None,
            "ready": self.ready,
            "cpu_percent": None,
            "gpu_util": None,
            "net_bytes": None,
            "connections": None,
            "last_activity": None,
            **self.metrics,
            "sampled_at": self.sampled_at,
        }


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class Sessions(dict[int, Session]):
    """The session servers of the daemon's held tasks, by task id."""

    def start(self, task: dict, devices: list[str], runner, *, host: str, hostname: str) -> None:
        """Run the task's session server on a free port of ``host`` through the runner;
        ``StartFailed`` (recurring when the session object is at fault) when it cannot."""
        if not getattr(runner, "sessions", False):
            raise StartFailed(f"{runner.mode} mode does not run sessions", recurs=True)
        try:
            spec = SessionSpec.parse(task["session"])
        except SessionError as error:
            raise StartFailed(str(error), recurs=True) from error
        try:
            port = free_port(host)
        except OSError as error:
            raise StartFailed(f"no free port on the session host {host}: {error}", recurs=False) from error
        task_dir = getattr(runner, "task_dir", None)
        root_dir = task_dir(task["id"]).resolve() if task_dir else None
        try:
            run = session_task(task, spec, host=host, port=port, root_dir=root_dir)
        except SessionError as error:
            raise StartFailed(str(error), recurs=True) from error
        runner.start(run, devices)
        self[task["id"]] = Session(task["id"], spec, host, port, url_host(host, hostname), devices)
        log.info("session starting", extra={"fields": {"task": task["id"], "kind": spec.kind, "port": port}})

    def watch(self, held: dict, runner, now: float, nvml=None, moved: dict | None = None) -> bool:
        """Probe each running session until it answers and measure it every ``sample_s``; forget
        those whose task ended or is no longer ours (``held``: the daemon's held tasks). True when
        one has just come up (the daemon heartbeats at once). A session whose probe or sample
        fails is logged and reported with nulls: the others and the daemon go on. ``moved``: the
        session tunnel's bytes by task id, when the daemon keeps one."""
        came_up = False
        for task_id, session in list(self.items()):
            task = held.get(task_id)
            if task is None or task.ended:
                del self[task_id]
                continue
            if not task.started or task.stop:
                continue
            try:
                if session.probe(now):
                    came_up = True
                    log.info("session ready", extra={"fields": {"task": task_id, "url": session.url}})
                through = moved.get(task_id, 0) if moved is not None else None
                session.sample(now, getattr(runner, "pid", lambda _: None)(task_id), nvml, through)
            except Exception:
                log.exception("could not measure the session", extra={"fields": {"task": task_id}})
                session.unknown()
        return came_up

    def routes(self, held: dict) -> dict[int, Route]:
        """The sessions the tunnel may reach: those whose task runs here and answers."""
        return {
            task_id: session.route()
            for task_id, session in self.items()
            if session.ready and (task := held.get(task_id)) is not None and task.started and not task.ended
        }

    def reports(self, held: dict) -> dict[str, dict]:
        """The heartbeat's ``sessions``: an entry for each session whose task runs."""
        return {
            str(task_id): session.report()
            for task_id, session in self.items()
            if (task := held.get(task_id)) is not None and task.started and not task.ended
        }
