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

What is measured (``None`` means "not known here", never "idle"):

- ``cpu_percent``: the CPU time of the server's processes over the sample interval (its session,
  as in ``setsid``, and every descendant of its first process), and of their children that ended
  and were waited for in between; 100 = one core busy;
- ``gpu_util``: NVML's utilisation of the task's GPUs (their mean); None without GPUs or NVML;
- ``connections``: ESTABLISHED TCP connections to the session's port on this host;
- ``net_bytes``: None in process mode (a process's traffic is not counted apart on a shared
  network namespace);
- ``last_activity``: a Jupyter server's own (``api/status``), None for the port kind.
"""

import importlib.util
import json
import logging
import math
import os
import re
import shlex
import shutil
import socket
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import httpcore
import psutil

from klique.worker.runs import StartFailed

log = logging.getLogger("klique.worker")

JUPYTER, PORT = "jupyter", "port"
KINDS = (JUPYTER, PORT)
DEFAULT_SAMPLE_S = 15.0
MIN_SAMPLE_S = 1.0
PROBE_EVERY_S = 0.5
# Wall-clock limits of one request to a session server, from connecting to the last byte read: the
# daemon asks from its only thread, so a server that answers slowly must not hold it.
PROBE_DEADLINE_S = 2.0
STATUS_DEADLINE_S = 2.0
STATUS_MAX_BYTES = 64 * 1024
# Counted as "the server answers": it is up even when it wants a login.
UP_STATUSES = {401, 403}
BASE_URL = re.compile(r"^/([A-Za-z0-9._~-]+/)*$")
PATH = re.compile(r"^/[A-Za-z0-9._~/?=&%-]*$")
WILDCARDS = {"", "0.0.0.0", "::"}
TCP_ESTABLISHED = "01"


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
        return cls(kind, token, base_url, ready_path, command, max(MIN_SAMPLE_S, float(sample_s)))


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


class Expired(httpcore.ReadTimeout):
    """A request to a session server outran its wall-clock deadline."""


class _UntilStream(httpcore.NetworkStream):
    """A connection whose every read and write waits at most until the deadline."""

    def __init__(self, stream: httpcore.NetworkStream, deadline: float):
        self.stream, self.deadline = stream, deadline

    def left(self, timeout: float | None) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise Expired("deadline passed")
        return remaining if timeout is None else min(timeout, remaining)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self.stream.read(max_bytes, self.left(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.stream.write(buffer, self.left(timeout))

    def close(self) -> None:
        self.stream.close()

    def get_extra_info(self, info: str):
        return self.stream.get_extra_info(info)


class _UntilBackend(httpcore.SyncBackend):
    def __init__(self, deadline: float):
        self.deadline = deadline

    def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise httpcore.ConnectTimeout("deadline passed")
        timeout = remaining if timeout is None else min(timeout, remaining)
        stream = super().connect_tcp(host, port, timeout, local_address, socket_options)
        return _UntilStream(stream, self.deadline)


def deadline_pool(seconds: float) -> httpcore.ConnectionPool:
    """An HTTP connection pool whose requests end ``seconds`` of wall clock after it is made, however
    slowly the server answers (httpx's and httpcore's own timeouts are per read: a trickle of bytes
    never trips them). One connection, closed after each request, so that it is never counted as a
    user's."""
    return httpcore.ConnectionPool(
        network_backend=_UntilBackend(time.monotonic() + seconds), max_keepalive_connections=0, retries=0
    )


def answers(url: str, headers: dict | None = None, deadline_s: float = PROBE_DEADLINE_S) -> bool:
    """Whether the server answers at ``url``: a 2xx or 3xx, or a 401/403 (up, wants a login),
    decided from the status line; its body is not read."""
    try:
        with deadline_pool(deadline_s) as pool, pool.stream("GET", url, headers=headers or {}) as answer:
            status = answer.status
    except (
        httpcore.TimeoutException,
        httpcore.NetworkError,
        httpcore.ProtocolError,
        httpcore.UnsupportedProtocol,
    ):
        return False
    return 200 <= status < 400 or status in UP_STATUSES


def jupyter_status(
    url: str, token: str, deadline_s: float = STATUS_DEADLINE_S, max_bytes: int = STATUS_MAX_BYTES
) -> dict | None:
    """A Jupyter server's ``api/status`` (``last_activity``, ``connections``, ``kernels``), read
    with the token, at most ``max_bytes``; this request does not count as activity. None when it
    does not answer in time or answers something else."""
    body = bytearray()
    try:
        with (
            deadline_pool(deadline_s) as pool,
            pool.stream("GET", url, headers={"Authorization": f"token {token}"}) as answer,
        ):
            if answer.status != 200:
                return None
            for chunk in answer.iter_stream():
                body += chunk
                if len(body) > max_bytes:
                    return None
        status = json.loads(body)
    except (
        httpcore.TimeoutException,
        httpcore.NetworkError,
        httpcore.ProtocolError,
        httpcore.UnsupportedProtocol,
        ValueError,
    ):
        return None
    return status if isinstance(status, dict) else None


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


# Measurement.


def session_processes(root_pid: int) -> list[psutil.Process]:
    """The server's processes: those of its session (``setsid``, which process mode gives every
    task), and every descendant of its first process (a Jupyter kernel gets a session of its own)."""
    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == root_pid:
                found[process.pid] = process
        except OSError:
            continue
    try:
        root = psutil.Process(root_pid)
        for process in [root, *root.children(recursive=True)]:
            found.setdefault(process.pid, process)
    except psutil.Error:
        pass
    return list(found.values())


class CpuMeter:
    """CPU use of a changing set of processes between two samples: the CPU seconds they used
    (user + system), and those of their children that ended and were waited for in between (a
    shell loop of short jobs, a kernel calling subprocesses: never alive at a sample), over the
    wall seconds between the samples, in percent (100 = one core)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        # (pid, create time) -> (its own CPU seconds, its waited-for children's)
        self.seen: dict[tuple[int, float], tuple[float, float]] = {}
        self.at: float | None = None

    def sample(self, processes: list[psutil.Process]) -> float | None:
        """The CPU percent since the last sample; None on the first."""
        now, used, waited, seen = self.clock(), 0.0, 0.0, {}
        for process in processes:
            try:
                with process.oneshot():
                    key = (process.pid, process.create_time())
                    times = process.cpu_times()
            except psutil.Error:
                continue
            seen[key] = (times.user + times.system, times.children_user + times.children_system)
            # A process started since the last sample counts from zero; one seen before, from then.
            own, children = self.seen.get(key, (0.0, 0.0))
            used += seen[key][0] - own
            waited += seen[key][1] - children
        # A process counted at the last sample that has ended since is in its parent's children
        # times whole: what was counted of it then is not counted again.
        counted = sum(sum(times) for key, times in self.seen.items() if key not in seen and not _alive(key))
        used += max(0.0, waited - counted)
        previous, self.seen, self.at = self.at, seen, now
        if previous is None or now <= previous:
            return None
        return round(max(0.0, used) / (now - previous) * 100, 1)


def _alive(key: tuple[int, float]) -> bool:
    """Whether the process (pid, create time) still runs (left the session's tree, say)."""
    try:
        return psutil.Process(key[0]).create_time() == key[1]
    except psutil.Error:
        return False


def established(port: int, proc: Path = Path("/proc/net")) -> int | None:
    """ESTABLISHED TCP connections whose local port is ``port`` (clients of the server), from
    ``/proc/net/tcp`` and ``tcp6``; through psutil where there is no ``/proc``; None when unknown."""
    tables = [proc / "tcp", proc / "tcp6"]
    if not any(table.exists() for table in tables):
        try:
            return sum(
                1
                for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
            )
        except (psutil.Error, OSError):
            return None
    count = 0
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        count += count_established(lines, port)
    return count


def count_established(lines: list[str], port: int) -> int:
    """Rows of a ``/proc/net/tcp`` table (``sl local_address rem_address st ...``) in state
    ESTABLISHED whose local port is ``port``."""
    count = 0
    for line in lines:
        columns = line.split()
        if len(columns) < 4 or columns[3] != TCP_ESTABLISHED:
            continue
        try:
            local_port = int(columns[1].rsplit(":", 1)[1], 16)
        except (IndexError, ValueError):
            continue
        count += local_port == port
    return count


def gpu_utilisation(nvml, devices: list[str]) -> float | None:
    """The mean NVML utilisation (percent) of ``devices`` (NVML UUIDs or indexes); None without
    devices, without NVML, or when NVML does not answer for them: never a made-up 0."""
    if nvml is None or not devices:
        return None
    stats = {entry["index"]: entry["utilization_pct"] for entry in nvml.stats()}
    if not stats:
        return None
    try:
        by_uuid = {gpu.uuid: gpu.index for gpu in nvml.gpus()}
    except Exception:  # NVML failing after start: unknown, not idle
        by_uuid = {}
    indexes = [by_uuid.get(d, int(d) if d.isdigit() else None) for d in devices]
    found = [stats[i] for i in indexes if i in stats]
    if len(found) != len(devices):
        return None
    return round(sum(found) / len(found), 1)


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

    def headers(self) -> dict:
        return {"Authorization": f"token {self.spec.token}"} if self.spec.kind == JUPYTER else {}

    def probe(self, now: float) -> bool:
        """Ask the server once, at most every ``PROBE_EVERY_S``; True when it has just come up (it
        is then measured at once)."""
        if self.ready or now < self.next_probe:
            return False
        self.next_probe = now + PROBE_EVERY_S
        if not answers(self.local + join(self.spec.base_url, self.spec.ready_path), self.headers()):
            return False
        self.ready, self.next_sample = True, now
        return True

    def sample(self, now: float, root_pid: int | None, nvml=None) -> bool:
        """Measure, from the start and then every ``sample_s``, whether it answers yet or not;
        True when it did. The first sample starts the CPU count (its ``cpu_percent`` is None)."""
        if now < self.next_sample:
            return False
        self.next_sample = now + self.spec.sample_s
        # Connections first: the status request below must not count as a client.
        metrics = {
            "connections": established(self.port),
            "cpu_percent": self.cpu.sample(session_processes(root_pid)) if root_pid else None,
            "gpu_util": gpu_utilisation(nvml, self.devices),
            "net_bytes": None,
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

    def watch(self, held: dict, runner, now: float, nvml=None) -> bool:
        """Probe each running session until it answers and measure it every ``sample_s``; forget
        those whose task ended or is no longer ours (``held``: the daemon's held tasks). True when
        one has just come up (the daemon heartbeats at once). A session whose probe or sample
        fails is logged and reported with nulls: the others and the daemon go on."""
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
                session.sample(now, getattr(runner, "pid", lambda _: None)(task_id), nvml)
            except Exception:
                log.exception("could not measure the session", extra={"fields": {"task": task_id}})
                session.unknown()
        return came_up

    def reports(self, held: dict) -> dict[str, dict]:
        """The heartbeat's ``sessions``: an entry for each session whose task runs."""
        return {
            str(task_id): session.report()
            for task_id, session in self.items()
            if (task := held.get(task_id)) is not None and task.started and not task.ended
        }
