"""The local provider: each node is a ``klique-worker`` process (process mode) on this host, for
``make run``'s demo and the tests.

The node's user data is read as a cloud node's boot script would be: ``KEY=VALUE`` lines (``export``
and shell quoting allowed, other lines ignored). Its ``KLIQUE_*`` variables become the worker's
environment, so ``KLIQUE_SERVER`` and ``KLIQUE_ENROLMENT_TOKEN`` (both required) reach the daemon
without showing on its command line. The worker runs with ``--gpus`` from the instance type,
``--hostname`` the node's name and a state folder of its own under the provider's ``folder``.

Nodes outlive the process that launched them, as VMs outlive an autoscaler: ``instances.json`` in
the folder (under a file lock) records them, and a node is alive while its pid is a live process
with the start time recorded at launch (``/proc/PID/stat``: a reused pid has another). ``terminate``
sends SIGTERM; a node still alive ``kill_after_s`` later gets SIGKILL (with the task process groups
its daemon left) at the next ``describe`` or ``terminate``.
"""

import fcntl
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from klique.cloud.providers import (
    CapacityUnavailable,
    Instance,
    Market,
    ProviderError,
    SpotRefused,
    check_market,
)

SETTINGS = {
    "folder": "where the ledger, the nodes' state folders and their logs live (required)",
    "instance_types": "instance type -> GPUs per node, e.g. {'local.4gpu': 4}",
    "spot_available": "false to refuse every spot launch, as a cloud out of spot capacity does",
    "max_nodes": "the most live nodes this host holds; more are refused for capacity",
    "worker_command": "the command that starts klique-worker (default: the one beside this Python)",
    "kill_after_s": "SIGKILL a terminated node still running this long after SIGTERM (default 30)",
    "keep_terminated_s": "how long describe still lists an ended node (default 3600)",
}
PASSED_THROUGH = ("PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "PYTHONPATH", "SSL_CERT_FILE")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")
VARIABLE = re.compile(r"^KLIQUE_[A-Z0-9_]+$")
MARKER = "KLIQUE_CLOUD_INSTANCE"


class LocalProvider:
    name = "local"

    def __init__(
        self,
        folder: Path,
        instance_types: dict[str, int] | None = None,
        *,
        spot_available: bool = True,
        max_nodes: int | None = None,
        worker_command: list[str] | None = None,
        kill_after_s: float = 30,
        keep_terminated_s: float = 3600,
    ):
        self.folder = Path(folder)
        self.instance_types = dict(instance_types or {})
        self.spot_available = spot_available
        self.max_nodes = max_nodes
        self.worker_command = list(worker_command or default_worker_command())
        self.kill_after_s = kill_after_s
        self.keep_terminated_s = keep_terminated_s
        self.children: dict[int, subprocess.Popen] = {}

    @classmethod
    def settings_errors(cls, settings: dict) -> dict[str, str]:
        errors = {key: "not a setting of the local provider" for key in settings if key not in SETTINGS}
        if not isinstance(settings.get("folder"), str | Path) or not str(settings.get("folder")):
            errors["folder"] = "required: a folder path"
        types = settings.get("instance_types", {})
        if not isinstance(types, dict) or not all(
            isinstance(name, str) and NAME.match(name) and type(gpus) is int and 0 <= gpus <= 1024
            for name, gpus in types.items()
        ):
            errors["instance_types"] = "an object of instance type name -> GPUs (0 to 1024)"
        if not isinstance(settings.get("spot_available", True), bool):
            errors["spot_available"] = "true or false"
        limit = settings.get("max_nodes")
        if limit is not None and (type(limit) is not int or limit < 0):
            errors["max_nodes"] = "a whole number, 0 or more"
        command = settings.get("worker_command")
        if command is not None and (
            not isinstance(command, list) or not command or not all(isinstance(p, str) for p in command)
        ):
            errors["worker_command"] = "a non-empty list of strings"
        for key in ("kill_after_s", "keep_terminated_s"):
            value = settings.get(key)
            if value is not None and (type(value) not in (int, float) or value < 0):
                errors[key] = "a number of seconds, 0 or more"
        return errors

    @classmethod
    def from_settings(cls, settings: dict, credentials: dict | None = None) -> "LocalProvider":
        """The local provider has no credentials; ``credentials`` is accepted and ignored."""
        return cls(
            Path(settings["folder"]),
            settings.get("instance_types"),
            spot_available=settings.get("spot_available", True),
            max_nodes=settings.get("max_nodes"),
            worker_command=settings.get("worker_command"),
            kill_after_s=settings.get("kill_after_s", 30),
            keep_terminated_s=settings.get("keep_terminated_s", 3600),
        )

    def launch(self, pool: str, node: str, instance_type: str, market: Market, user_data: str) -> Instance:
        check_market(market)
        if not NAME.match(node):
            raise ProviderError("InvalidParameterValue", f"node name {node!r} is not a host name")
        variables = read_user_data(user_data)
        missing = [name for name in ("KLIQUE_SERVER", "KLIQUE_ENROLMENT_TOKEN") if not variables.get(name)]
        if missing:
            raise ProviderError("InvalidUserData", f"user data lacks {', '.join(missing)}")
        gpus = self._gpus(instance_type, variables)
        if market == "spot" and not self.spot_available:
            raise SpotRefused("InsufficientInstanceCapacity", "the local provider has no spot capacity")
        with self._ledger() as ledger:
            self._sweep(ledger)
            live = sum(1 for entry in ledger.values() if entry["state"] != "terminated")
            if self.max_nodes is not None and live >= self.max_nodes:
                refused = SpotRefused if market == "spot" else CapacityUnavailable
                raise refused(
                    "InsufficientInstanceCapacity", f"this host holds at most {self.max_nodes} nodes"
                )
            instance_id = f"local-{secrets.token_hex(6)}"
            home = self.folder / "nodes" / instance_id
            home.mkdir(parents=True)
            environment = {name: os.environ[name] for name in PASSED_THROUGH if name in os.environ}
            environment.update(variables)
            environment.update({MARKER: instance_id, "KLIQUE_CLOUD_POOL": pool})
            command = [
                *self.worker_command,
                *("--mode", "process", "--gpus", str(gpus), "--hostname", node),
                *("--state-dir", str(home / "state")),
            ]
            try:
                with (home / "worker.log").open("ab") as log:
                    child = subprocess.Popen(
                        command,
                        env=environment,
                        cwd=home,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            except OSError as error:
                raise ProviderError("LaunchFailed", f"{command[0]}: {error}") from error
            self.children[child.pid] = child
            ledger[instance_id] = {
                "started": _start_time(child.pid),
                "node": node,
                "pool": pool,
                "instance_type": instance_type,
                "market": market,
                "pid": child.pid,
                "launched_at": datetime.now(UTC).isoformat(),
                "state": "pending",
                "stop_requested_at": None,
                "ended_at": None,
                "reason": "",
            }
            return _instance(instance_id, ledger[instance_id])

    def describe(self, pool: str) -> list[Instance]:
        with self._ledger() as ledger:
            self._sweep(ledger)
            found = [_instance(key, entry) for key, entry in ledger.items() if entry["pool"] == pool]
        return sorted(found, key=lambda instance: (instance.launched_at, instance.instance_id))

    def terminate(self, instance_ids: list[str]) -> None:
        with self._ledger() as ledger:
            unknown = [key for key in instance_ids if key not in ledger]
            if unknown:
                raise ProviderError("InvalidInstanceID.NotFound", f"no such nodes: {', '.join(unknown)}")
            self._sweep(ledger)
            now = time.time()
            for key in instance_ids:
                entry = ledger[key]
                if entry["state"] == "terminated" or entry["stop_requested_at"] is not None:
                    continue
                entry["stop_requested_at"] = now
                _signal(entry["pid"], signal.SIGTERM)
            self._sweep(ledger)

    def log_path(self, instance_id: str) -> Path:
        """The node's ``klique-worker`` output."""
        return self.folder / "nodes" / instance_id / "worker.log"

    def _gpus(self, instance_type: str, variables: dict[str, str]) -> int:
        """GPUs per node: the instance type's, or ``KLIQUE_WORKER_GPUS`` when no types are configured."""
        if instance_type in self.instance_types:
            return self.instance_types[instance_type]
        given = variables.get("KLIQUE_WORKER_GPUS", "")
        if not self.instance_types and given.isdigit():
            return int(given)
        known = ", ".join(sorted(self.instance_types)) or "none configured, and no KLIQUE_WORKER_GPUS"
        raise ProviderError("InvalidInstanceType", f"{instance_type!r} is not one of: {known}")

    def _sweep(self, ledger: dict) -> None:
        """Bring each entry's state up to date; SIGKILL what outlived its SIGTERM; forget old ends."""
        now = time.time()
        for key in list(ledger):
            entry = ledger[key]
            if entry["state"] == "terminated":
                if now - entry["ended_at"] > self.keep_terminated_s:
                    del ledger[key]
                continue
            alive, code = self._alive(entry)
            if alive and entry["stop_requested_at"] is not None:
                if now - entry["stop_requested_at"] >= self.kill_after_s:
                    _kill_node(entry["pid"], self.folder / "nodes" / key / "state")
                    alive, code = self._alive(entry, wait_s=5)
                    entry["reason"] = "killed: still running after SIGTERM"
            if alive:
                entry["state"] = "stopping" if entry["stop_requested_at"] is not None else "running"
                continue
            entry["state"], entry["ended_at"] = "terminated", now
            if entry["stop_requested_at"] is not None:
                entry["reason"] = entry["reason"] or "terminated"
            else:
                entry["reason"] = "exited" if code is None else f"exited with code {code}"

    def _alive(self, entry: dict, wait_s: float = 0) -> tuple[bool, int | None]:
        """Whether the node's process runs, and its exit code when this process started it."""
        pid = entry["pid"]
        deadline = time.monotonic() + wait_s
        while True:
            child = self.children.get(pid)
            if child is not None and child.poll() is not None:
                del self.children[pid]
                return False, child.returncode
            if child is None and (entry["started"] is None or _start_time(pid) != entry["started"]):
                return False, None
            if time.monotonic() >= deadline:
                return True, None
            time.sleep(0.05)

    @contextmanager
    def _ledger(self):
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / "instances.json"
        with (self.folder / "instances.lock").open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                ledger = json.loads(path.read_text()) if path.exists() else {}
                yield ledger
                scratch = path.with_suffix(".tmp")
                scratch.write_text(json.dumps(ledger, indent=1))
                os.replace(scratch, path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def read_user_data(user_data: str) -> dict[str, str]:
    """The ``KLIQUE_*`` variables of ``KEY=VALUE`` lines (optionally ``export``-ed and quoted)."""
    variables = {}
    for line in user_data.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError as error:
            raise ProviderError("InvalidUserData", f"line {line!r}: {error}") from error
        if words[:1] == ["export"]:
            words = words[1:]
        if len(words) != 1 or "=" not in words[0]:
            continue
        name, value = words[0].split("=", 1)
        if VARIABLE.match(name):
            variables[name] = value
    return variables


def default_worker_command() -> list[str]:
    """``klique-worker`` beside this Python (its virtualenv), on the PATH, or through this Python."""
    beside = Path(sys.executable).with_name("klique-worker")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("klique-worker")
    if found:
        return [found]
    return [sys.executable, "-c", "import sys; from klique.worker.cli import main; sys.exit(main())"]


def _instance(instance_id: str, entry: dict) -> Instance:
    return Instance(
        instance_id=instance_id,
        node=entry["node"],
        pool=entry["pool"],
        instance_type=entry["instance_type"],
        market=entry["market"],
        state=entry["state"],
        launched_at=datetime.fromisoformat(entry["launched_at"]),
        address="127.0.0.1",
        reason=entry["reason"],
    )


def _start_time(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks since boot), or None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_node(pid: int, state_dir: Path) -> None:
    """SIGKILL the worker's process group and the task process groups its ledger names (as a VM's
    power-off would)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        _signal(pid, signal.SIGKILL)
    try:
        groups = json.loads((state_dir / "running.json").read_text())
    except (OSError, ValueError):
        groups = {}
    for task_id, pgid in groups.items():
        try:
            environ = Path(f"/proc/{pgid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"KLIQUE_TASK_ID={task_id}".encode() in environ:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
