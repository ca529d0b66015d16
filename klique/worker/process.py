"""Process mode: each task runs as ``/bin/sh -c COMMAND`` in its own process group, with
``CUDA_VISIBLE_DEVICES`` set to the GPUs the claim gave it. A stop sends SIGTERM to the group,
then SIGKILL when the grace is over. The groups are written to ``running.json`` so that a daemon
restarted after a crash kills what its predecessor left running (that work was requeued).

A thread per process waits for it to end and calls ``on_change`` (the daemon's wake-up), so an
exit is reported at once rather than at the next tick."""

import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from klique.worker.runs import (
    Change,
    clean_environ,
    exit_code,
    start_failure,
    tail,
    task_variables,
    utc_now,
)

log = logging.getLogger("klique.worker")


class ProcessRunner:
    mode = "process"
    claims_total = False
    multi_node = False
    sessions = True  # runs session servers on this host (klique/worker/sessions.py)
    concurrent_starts = True  # ``start`` may run in several threads at once (klique/worker/starts.py)
    limits_time = False  # the daemon stops work at its time limit (klique/worker/work.py)

    def __init__(self, state_dir: Path, checkpoint_root: Path):
        self.state_dir, self.checkpoint_root = state_dir, checkpoint_root
        self.processes: dict[int, subprocess.Popen] = {}
        self.announced: set[int] = set()
        self.ledger = state_dir / "running.json"
        self.on_change: Callable[[], None] | None = None  # called from another thread when work ends
        self.seen_at: dict[tuple[int, str], str] = {}  # when a start or an exit happened, till reported
        self.lock = threading.Lock()  # ``processes`` and its ledger file, between concurrent starts

    def task_dir(self, task_id: int) -> Path:
        return self.state_dir / "tasks" / str(task_id)

    @classmethod
    def add_arguments(cls, group) -> None:
        """Process mode has no flags of its own."""

    @classmethod
    def from_args(cls, args, *, state_dir: Path, checkpoint_root: Path, hostname: str) -> "ProcessRunner":
        return cls(state_dir, checkpoint_root)

    def recover(self) -> dict[int, str]:
        """A process does not outlive the daemon's ownership: what a previous daemon left running
        here was requeued, so it is killed and nothing is adopted."""
        killed = self.kill_leftovers()
        if killed:
            log.warning("stopped work a previous daemon left running", extra={"fields": {"tasks": killed}})
        return {}

    def adopt(self, tasks: list[dict], drop: list[int]) -> None:
        """Nothing to adopt (``recover`` found nothing)."""

    def kill_leftovers(self) -> list[int]:
        """Kill the process groups a previous daemon on this state folder left behind."""
        try:
            groups = json.loads(self.ledger.read_text())
        except (OSError, ValueError):
            groups = {}
        killed = []
        for task_id, pgid in groups.items():
            if _runs_task(pgid, task_id):
                _signal_group(pgid, signal.SIGKILL)
                killed.append(int(task_id))
        with self.lock:
            self._save()
        return killed

    def start(self, task: dict, devices: list[str]) -> None:
        task_id = task["id"]
        workdir, checkpoints = self.task_dir(task_id), self.checkpoint_root / str(task_id)
        env = clean_environ()
        env.update(task_variables(task, checkpoints))
        env.update(CUDA_VISIBLE_DEVICES=",".join(devices), CUDA_DEVICE_ORDER="PCI_BUS_ID")
        try:
            workdir.mkdir(parents=True, exist_ok=True)
            checkpoints.mkdir(parents=True, exist_ok=True)
            with (workdir / "output.log").open("ab") as output:
                process = subprocess.Popen(
                    ["/bin/sh", "-c", task["command"]],
                    cwd=workdir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
        except OSError as error:
            raise start_failure(error) from error
        self.seen_at[(task_id, "running")] = utc_now()
        with self.lock:
            self.processes[task_id] = process
            self._save()
        watcher = threading.Thread(
            target=self._watch, args=(task_id, process), name=f"exit-{task_id}", daemon=True
        )
        watcher.start()

    def _watch(self, task_id: int, process: subprocess.Popen) -> None:
        process.wait()
        self.seen_at[(task_id, "exited")] = utc_now()
        if self.on_change is not None:
            self.on_change()

    def poll(self) -> list[Change]:
        changes = []
        with self.lock:
            processes = list(self.processes.items())
        for task_id, process in processes:
            if task_id not in self.announced:
                self.announced.add(task_id)
                at = self.seen_at.pop((task_id, "running"), "")
                changes.append(Change(task_id, "running", detail={"pid": str(process.pid)}, at=at))
            status = process.poll()
            if status is not None:
                _signal_group(process.pid, signal.SIGKILL)
                with self.lock:
                    del self.processes[task_id]
                self.announced.discard(task_id)
                at = self.seen_at.pop((task_id, "exited"), "")
                changes.append(Change(task_id, "exited", exit_code(status), at=at))
        if any(change.kind == "exited" for change in changes):
            with self.lock:
                self._save()
        return changes

    def terminate(self, task_id: int, grace_s: float = 0) -> None:
        """SIGTERM to the group; the daemon sends ``kill`` once ``grace_s`` is over."""
        if task_id in self.processes:
            _signal_group(self.processes[task_id].pid, signal.SIGTERM)

    def kill(self, task_id: int) -> None:
        if task_id in self.processes:
            _signal_group(self.processes[task_id].pid, signal.SIGKILL)

    def log_tail(self, task_id: int) -> str:
        return tail(self.task_dir(task_id) / "output.log")

    def pid(self, task_id: int) -> int | None:
        """The task's first process (its process group and session leader), while it runs."""
        process = self.processes.get(task_id)
        return process.pid if process is not None and process.poll() is None else None

    def _save(self) -> None:
        self.ledger.parent.mkdir(parents=True, exist_ok=True)
        self.ledger.write_text(json.dumps({str(t): p.pid for t, p in self.processes.items()}))


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _runs_task(pgid: int, task_id: str) -> bool:
    """Whether process ``pgid`` is still the leader running that task (not a reused pid)."""
    try:
        environ = Path(f"/proc/{pgid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"KLIQUE_TASK_ID={task_id}".encode() in environ
