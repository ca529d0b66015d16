"""What the runners (process and Slurm) share: the changes they report, the task's environment
and how an exit status becomes an exit code."""

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# Never handed to task code: the daemon's own credentials.
SECRET_VARIABLES = ("KLIQUE_ENROLMENT_TOKEN", "KLIQUE_ENROLMENT_TOKEN_FILE")
NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class Change:
    """Something that happened to a task's work: ``running``, ``exited`` (with its exit code) or
    ``released`` (the pool took the allocation back: Slurm requeued or dropped the job)."""

    task_id: int
    kind: str
    exit_code: int | None = None
    detail: dict = field(default_factory=dict)


class StartFailed(Exception):
    """The work could not be started here: the OS refused to run it (E2BIG: the command or the
    environment is above the argument limit; ENOENT; EACCES), its folder could not be made, or
    sbatch refused the job. Reported as ``start_failed``, not as stopped."""


def clean_environ() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name not in SECRET_VARIABLES}


def task_variables(task: dict, checkpoint_dir: Path) -> dict[str, str]:
    """The task's ``spec.env`` and what Klique tells every task: its id, its GPUs and where to
    keep checkpoints so that a preempted run can resume."""
    spec_env = (task.get("spec") or {}).get("env") or {}
    variables = {
        name: str(value) for name, value in spec_env.items() if isinstance(name, str) and NAME.match(name)
    }
    variables.update(
        KLIQUE_TASK_ID=str(task["id"]),
        KLIQUE_GPUS=str(task["gpus"]),
        KLIQUE_CHECKPOINT_DIR=str(checkpoint_dir),
        KLIQUE_PREEMPTION_COUNT=str(task.get("preemption_count", 0)),
    )
    return variables


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
