"""What the runners (one module per worker mode) share: the interface the daemon calls, the changes
they report, the task's environment and how an exit status becomes an exit code."""

import errno
import os
import re
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import ClassVar, Protocol

# Never handed to task code: the daemon's own credentials.
SECRET_VARIABLES = ("KLIQUE_ENROLMENT_TOKEN", "KLIQUE_ENROLMENT_TOKEN_FILE")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def env(name: str, default=None):
    """A flag's default from the environment (an empty variable counts as unset)."""
    return os.environ.get(name) or default


@dataclass(frozen=True)
class Change:
    """Something that happened to a task's work: ``running``, ``exited`` (with its exit code),
    ``released`` (the pool took the allocation back: Slurm requeued or dropped the job, a pod was
    evicted) or ``failed`` (it can never run as asked here, ``detail["error"]`` says why: a pod no
    node can take; reported as ``start_failed``)."""

    task_id: int
    kind: str
    exit_code: int | None = None
    detail: dict = field(default_factory=dict)
    at: str = ""  # when the runner saw it happen (ISO 8601, UTC), where it knows; else the report's time
    timed_out: bool = False  # the pool's scheduler ended it at its time limit (Slurm TIMEOUT, a pod deadline)


class Runner(Protocol):
    """How the daemon runs work in one worker mode; each mode is one module with one such class.

    ``claims_total``: the pool's scheduler picks the GPUs (Slurm, Kubernetes), so the daemon claims
    with a plain free total; otherwise it claims per-GPU slots and hands the runner the devices.
    ``multi_node``: it can run a task over ``nodes`` > 1. ``whole_gpus``: a fraction takes a whole
    GPU here (Slurm). ``limits_time``: the pool's scheduler stops work at its time limit (Slurm's
    ``--time``), so the daemon keeps no timer of its own. ``poll`` never blocks: it returns what
    happened since the last call."""

    mode: ClassVar[str]
    claims_total: ClassVar[bool]
    multi_node: ClassVar[bool]

    @classmethod
    def add_arguments(cls, group) -> None: ...

    @classmethod
    def from_args(cls, args, *, state_dir: Path, checkpoint_root: Path, hostname: str) -> "Runner": ...

    def recover(self) -> dict[int, str]:
        """At start: the tasks whose work an earlier daemon left here that this runner can keep
        following, each with the pool label its work carries ("" when none); what it cannot
        follow it stops. Several pools' daemons may share a worker tag (a hostname), so the daemon
        leaves another pool's work alone."""

    def adopt(self, tasks: list[dict], drop: list[int]) -> None:
        """Keep following ``tasks`` (handed back by the control plane); remove the work of ``drop``
        and only that: what ``recover`` found in neither list is another pool's."""

    def start(self, task: dict, devices: list[str]) -> None: ...

    def poll(self) -> "list[Change]": ...

    def terminate(self, task_id: int, grace_s: float) -> None: ...

    def kill(self, task_id: int) -> None: ...

    def log_tail(self, task_id: int) -> str: ...


class StartFailed(Exception):
    """The work could not be started here. ``recurs``: it would fail the same on any worker, so it
    is reported as ``start_failed`` (counted towards failing the task); otherwise the trouble is
    this host's and the work is handed back as ``stopped``. See ``start_failure``."""

    def __init__(self, message: str, *, recurs: bool):
        super().__init__(message)
        self.recurs = recurs


# OS errors at start that the task itself causes: its command or environment above the argument
# limit. Both runners exec only /bin/sh or sbatch, and every path is the worker's own folder, so
# any other errno (ENOSPC, EMFILE, EAGAIN, ENOMEM, ENOENT, EACCES, ENAMETOOLONG...) is this host's.
RECURRING_ERRNOS = {errno.E2BIG}
# What sbatch says when it could not reach slurmctld (or authenticate to it) from this host, as
# against refusing the job.
SLURM_UNREACHABLE = (
    "Unable to contact slurm controller",
    "Socket timed out",
    "Communication connection failure",
    "Zero Bytes were transmitted or received",
    "Protocol authentication error",
    "temporarily unable to accept job",
    "in standby mode",
)


def start_failure(error: OSError | subprocess.SubprocessError) -> StartFailed:
    """The one rule for what an error at start means: E2BIG, or sbatch refusing the job (a
    non-zero exit with its reason), recurs wherever the task runs; anything else (a full disk, no
    file descriptors, a failed fork, sbatch timing out or not reaching the controller) is a
    passing trouble of this host, which must not use up the task's start attempts."""
    if isinstance(error, subprocess.CalledProcessError):
        message = (error.stderr or str(error)).strip()
        reached = not any(marker.lower() in message.lower() for marker in SLURM_UNREACHABLE)
        return StartFailed(message, recurs=error.returncode > 0 and reached)
    recurs = isinstance(error, OSError) and error.errno in RECURRING_ERRNOS
    return StartFailed(str(error), recurs=recurs)


def clean_environ() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in SECRET_VARIABLES}


def task_variables(task: dict, checkpoint_dir: Path) -> dict[str, str]:
    """The task's ``spec.env`` and what Klique tells every task: its id, its GPUs and where to
    keep checkpoints so that a preempted run can resume."""
    spec = task.get("spec") or {}
    if not isinstance(spec, dict):
        raise StartFailed("the task's spec is not an object", recurs=True)
    spec_env = spec.get("env") or {}
    if not isinstance(spec_env, dict):
        raise StartFailed("spec.env is not an object of environment variables", recurs=True)
    variables = {
        name: str(value) for name, value in spec_env.items() if isinstance(name, str) and NAME.match(name)
    }
    variables.update(
        KLIQUE_TASK_ID=str(task["id"]),
        KLIQUE_GPUS=str(task["gpus"]),
        KLIQUE_CHECKPOINT_DIR=str(checkpoint_dir),
        KLIQUE_CHECKPOINT_MARK=str(checkpoint_dir / ".klique-checkpoint"),
        KLIQUE_PREEMPTION_COUNT=str(task.get("preemption_count", 0)),
    )
    try:
        limit, index = time_limit_s(task), array_index(task)
    except ValueError as error:
        raise StartFailed(str(error), recurs=True) from None
    if limit is not None:
        variables["KLIQUE_TIME_LIMIT_S"] = str(limit)
    if index is not None:
        variables["KLIQUE_ARRAY_INDEX"] = str(index)
    return variables


def _whole(task: dict, name: str, least: int) -> int | None:
    value = task.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"{name} {value!r} is not a whole number of at least {least}")
    return value


def time_limit_s(task: dict) -> int | None:
    """The running seconds the task's work has left before its time limit (None: no limit);
    ValueError when the claim's ``time_limit_s`` is not a whole number of at least 1."""
    return _whole(task, "time_limit_s", 1)


def array_index(task: dict) -> int | None:
    """The task's index in its array (None: not in one); ValueError when it cannot be read."""
    return _whole(task, "array_index", 0)


def exit_code(status: int) -> int:
    """A subprocess return code as a shell shows it: a signal N becomes 128 + N."""
    return 128 - status if status < 0 else status


def tail(path: Path, limit: int = 16_000) -> str:
    try:
        with path.open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def utc_now() -> str:
    return datetime.now(UTC).isoformat()
