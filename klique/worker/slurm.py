"""Slurm mode: each claimed task becomes a batch job (``sbatch --gres=gpu:N``), followed with
``squeue`` (and ``sacct`` once the job has left the controller's memory). The task is reported
running only while Slurm keeps the job allocated: a job Slurm requeues, preempts or loses, or one
that waits unallocated past the pending timeout, is cancelled and released back to Klique's
queue (reason ``released``).

While the job waits in Slurm the task stays ``placed``, and a placed task is counted against its
policy's reservation and limit and the pool's capacity, and charged from its placement (DESIGN
section 4: waiting for a node counts). The pending timeout bounds that: a job kept waiting is
counted and charged for at most the claim latency plus ``pending_timeout_s`` (and one poll),
then released and its usage interval closed.

A task with a time limit is submitted with ``--time`` (the seconds it has left, which Slurm
rounds up to whole minutes): Slurm stops the job there (state TIMEOUT), and the end is reported as
an exit that timed out."""

import logging
import math
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from klique.worker.runs import (
    Change,
    clean_environ,
    env,
    start_failure,
    tail,
    task_variables,
    time_limit_s,
)

log = logging.getLogger("klique.worker")

ALLOCATED = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING", "STOPPED", "RESIZING"}
ENDED = {"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "CANCELLED", "DEADLINE"}
# Ended states that only a job that held its allocation can reach: a job that started and ended
# between two polls was never seen running, yet it ran.
RAN = {"COMPLETED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY"}
LOST = {"NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "REVOKED"}
# Why a job pends that no wait can cure: it asks more than its partition or account ever allows
# (more nodes than the partition has, say). Such work fails with Slurm's reason instead of being
# handed back to Klique's queue to be placed here again.
NEVER_RUNS = {
    "PartitionNodeLimit",
    "PartitionConfig",
    "PartitionTimeLimit",
    "BadConstraints",
    "AssocMaxNodesPerJobLimit",
    "AssocMaxGRESPerJob",
    "QOSMaxNodePerJobLimit",
    "QOSMaxGRESPerJob",
}
# A job gone from squeue and still not in sacct after this long is released.
UNKNOWN_AFTER_S = 60
# How long a Slurm command may take before the controller counts as not answering.
COMMAND_TIMEOUT_S = 30


@dataclass
class Job:
    job_id: str
    submitted: float
    allocated: bool = False
    unseen_since: float | None = None


class SlurmRunner:
    mode = "slurm"
    claims_total = True  # Slurm picks the GPUs
    multi_node = True  # sbatch --nodes=N
    whole_gpus = True  # Slurm allocates whole GPUs, so a fraction takes one
    limits_time = True  # sbatch --time: Slurm stops the job at its time limit

    def __init__(
        self,
        state_dir: Path,
        checkpoint_root: Path,
        *,
        tag: str,
        partition: str = "",
        extra_args: tuple[str, ...] = (),
        pending_timeout_s: float = 300,
        clock=time.monotonic,
    ):
        self.state_dir, self.checkpoint_root, self.tag = state_dir, checkpoint_root, tag
        self.partition, self.extra_args, self.pending_timeout_s = partition, extra_args, pending_timeout_s
        self.clock = clock
        self.jobs: dict[int, Job] = {}

    @classmethod
    def add_arguments(cls, group) -> None:
        group.add_argument("--slurm-partition", default=env("KLIQUE_SLURM_PARTITION", ""))
        group.add_argument(
            "--sbatch-arg",
            action="append",
            default=env("KLIQUE_SBATCH_ARGS", "").split(),
            help="an extra sbatch argument, e.g. --sbatch-arg=--account=ml (repeatable) [KLIQUE_SBATCH_ARGS]",
        )
        group.add_argument(
            "--pending-timeout",
            type=float,
            default=float(env("KLIQUE_SLURM_PENDING_TIMEOUT_S", 300)),
            help="release a Slurm job back to Klique when it waits unallocated this long after sbatch "
            "(seconds; it is counted and charged while it waits) [KLIQUE_SLURM_PENDING_TIMEOUT_S]",
        )

    @classmethod
    def from_args(cls, args, *, state_dir: Path, checkpoint_root: Path, hostname: str) -> "SlurmRunner":
        return cls(
            state_dir,
            checkpoint_root,
            tag=hostname,
            partition=args.slurm_partition,
            extra_args=tuple(args.sbatch_arg),
            pending_timeout_s=args.pending_timeout,
        )

    def observed_gpus(self) -> int | None:
        """The GPUs Slurm has in this daemon's partition: the ``gpu`` GRES of its nodes that can
        take work (not down, drained or failing), from ``sinfo``; None when sinfo cannot say."""
        args = ["sinfo", "--noheader", "--Node", "--format=%N|%G|%t"]
        args += [f"--partition={self.partition}"] if self.partition else []
        listed = _run(args, check=False)
        if not listed.strip():
            return None
        return gres_gpus(listed)

    def recover(self) -> dict[int, str]:
        """Jobs a previous daemon with this tag left in Slurm were requeued: cancel them, adopt none."""
        cancelled = self.kill_leftovers()
        if cancelled:
            log.warning("cancelled jobs a previous daemon left", extra={"fields": {"tasks": cancelled}})
        return {}

    def adopt(self, tasks: list[dict], drop: list[int]) -> None:
        """Nothing to adopt (``recover`` found nothing)."""

    def kill_leftovers(self) -> list[int]:
        """Cancel the jobs a previous daemon with this tag left in Slurm (that work was requeued)."""
        lines = _run(["squeue", "-h", "--me", "-o", "%i %j %k"]).splitlines()
        leftovers = {}
        for line in lines:
            job_id, name, comment = (line.split(maxsplit=2) + ["", ""])[:3]
            if comment.strip() == self.comment and name.startswith("klique-"):
                leftovers[int(name.removeprefix("klique-"))] = job_id
        if leftovers:
            _run(["scancel", *leftovers.values()])
        return sorted(leftovers)

    @property
    def comment(self) -> str:
        return f"klique-worker:{self.tag}"

    def start(self, task: dict, devices: list[str]) -> None:
        task_id = task["id"]
        folder = self.state_dir / "tasks" / str(task_id)
        checkpoints = self.checkpoint_root / str(task_id)
        exports = "".join(
            f"export {name}={shlex.quote(value)}\n"
            for name, value in task_variables(task, checkpoints).items()
        )
        script = folder / "job.sh"
        output = folder / "slurm-%j.out"
        try:
            folder.mkdir(parents=True, exist_ok=True)
            checkpoints.mkdir(parents=True, exist_ok=True)
            script.write_text(f"#!/bin/sh\n{exports}exec /bin/sh -c {shlex.quote(task['command'])}\n")
        except OSError as error:
            raise start_failure(error) from error
        gpus = math.ceil(float(task["gpus"]))
        nodes = int(task.get("nodes") or 1)
        args = ["sbatch", "--parsable", f"--job-name=klique-{task_id}", f"--comment={self.comment}"]
        args += [f"--nodes={nodes}"] if nodes > 1 else []
        args += [f"--output={output}", f"--chdir={folder}"]
        args += [f"--gres=gpu:{gpus}"] if gpus else []
        args += [f"--partition={self.partition}"] if self.partition else []
        args += [*self.extra_args]
        # After --sbatch-arg (the last --time wins): an IT default applies to tasks without a limit.
        limit = time_limit_s(task)
        args += [f"--time={slurm_time(limit)}"] if limit is not None else []
        args += [str(script)]
        try:
            job_id = _run(args, env=clean_environ()).strip().split(";")[0]
        except (OSError, subprocess.SubprocessError) as error:
            raise start_failure(error) from error
        self.jobs[task_id] = Job(job_id, self.clock())
        fields = {"task": task_id, "slurm_job": job_id, "gpus": gpus, "nodes": nodes}
        log.info("submitted", extra={"fields": fields})

    def poll(self) -> list[Change]:
        if not self.jobs:
            return []
        states = self._squeue()
        if states is None:
            return []
        changes, now = [], self.clock()
        for task_id, job in list(self.jobs.items()):
            state, status, reason = states.get(job.job_id, (None, None, ""))
            if state is None:
                state, status = self._sacct(job, now)
                if state is None:
                    continue
            for change in self._changes(task_id, job, state, status, now, reason):
                changes.append(change)
                if change.kind != "running":
                    del self.jobs[task_id]
        return changes

    def _changes(
        self, task_id: int, job: Job, state: str, status: int | None, now: float, reason: str = ""
    ) -> list[Change]:
        detail = {"slurm_job": job.job_id, "slurm_state": state}
        if state == "PENDING" and reason in NEVER_RUNS:
            _run(["scancel", job.job_id], check=False)
            error = f"Slurm will never run this job as asked: it pends with reason {reason}"
            return [Change(task_id, "failed", detail={**detail, "error": error})]
        timed_out = state == "TIMEOUT"
        if timed_out and not status:  # Slurm's SIGTERM at the limit; sacct may record it as 0:0
            status = 143
        if state in ALLOCATED or (state in RAN and not job.allocated):
            started = [] if job.allocated else [Change(task_id, "running", detail=detail)]
            job.allocated = True
            ended = [Change(task_id, "exited", status, detail, timed_out=timed_out)] if state in RAN else []
            return started + ended
        if state in ENDED:
            return [Change(task_id, "exited", status, detail, timed_out=timed_out)]
        if state in LOST or job.allocated or now - job.submitted > self.pending_timeout_s:
            _run(["scancel", job.job_id], check=False)
            return [Change(task_id, "released", detail=detail)]
        return []

    def _squeue(self) -> dict[str, tuple[str, int, str]] | None:
        """Each known job's state, exit code and pending reason; None when the controller did not
        answer."""
        ids = ",".join(job.job_id for job in self.jobs.values())
        args = ["squeue", "-h", "-t", "all", "-j", ids, "-O", "JobID,State,exit_code,Reason"]
        try:
            done = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as error:
            log.warning("squeue failed", extra={"fields": {"error": str(error)}})
            return None
        if done.returncode and "Invalid job id" not in done.stderr:
            log.warning("squeue failed", extra={"fields": {"error": done.stderr.strip()}})
            return None
        found = {}
        for line in done.stdout.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[2].isdigit():
                reason = parts[3] if len(parts) > 3 else ""
                found[parts[0]] = (parts[1], _wait_status(int(parts[2])), reason)
        return found

    def _sacct(self, job: Job, now: float) -> tuple[str | None, int | None]:
        out = _run(["sacct", "-n", "-P", "-X", "-j", job.job_id, "-o", "State,ExitCode"], check=False)
        fields = out.splitlines()[0].split("|") if out.strip() else []
        if len(fields) == 2:
            state = fields[0].split()[0]
            code, _, sig = fields[1].partition(":")
            return state, 128 + int(sig) if sig.isdigit() and int(sig) else int(code or 0)
        job.unseen_since = job.unseen_since or now
        if now - job.unseen_since > UNKNOWN_AFTER_S:
            return "REVOKED", None
        return None, None

    def terminate(self, task_id: int, grace_s: float = 0) -> None:
        job = self.jobs.get(task_id)
        if job is not None:
            signal = ["--signal=TERM", "--full"] if job.allocated else []
            _run(["scancel", *signal, job.job_id], check=False)

    def kill(self, task_id: int) -> None:
        job = self.jobs.get(task_id)
        if job is not None:
            _run(["scancel", "--signal=KILL", "--full", job.job_id], check=False)
            _run(["scancel", job.job_id], check=False)

    def log_tail(self, task_id: int) -> str:
        logs = sorted(
            (self.state_dir / "tasks" / str(task_id)).glob("slurm-*.out"), key=lambda p: p.stat().st_mtime
        )
        return tail(logs[-1]) if logs else ""


def slurm_time(seconds: int) -> str:
    """``seconds`` as sbatch's ``--time``: HH:MM:SS, or D-HH:MM:SS from a day on."""
    minutes, secs = divmod(max(1, seconds), 60)
    hours, minutes = divmod(minutes, 60)
    days, hours = divmod(hours, 24)
    clock = f"{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{days}-{clock}" if days else clock


def _wait_status(status: int) -> int:
    """squeue's raw wait status as an exit code: a signal N becomes 128 + N."""
    return 128 + (status & 0x7F) if status & 0x7F else status >> 8


def _run(args: list[str], *, env=None, check: bool = True) -> str:
    try:
        done = subprocess.run(
            args, capture_output=True, text=True, env=env, timeout=COMMAND_TIMEOUT_S, check=check
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        if check:
            raise
        log.warning("slurm command failed", extra={"fields": {"command": args[0], "error": str(error)}})
        return ""
    return done.stdout


# sinfo's short node states that cannot take work (with or without a suffix such as "*" or "~").
UNAVAILABLE = ("down", "drain", "drng", "fail", "maint", "boot", "futr", "inval", "npc", "pow", "unk")


def gres_gpus(listed: str) -> int:
    """Sum the ``gpu`` GRES of ``sinfo --Node --format=%N|%G|%t`` lines (a node appears once per
    partition it is in, so each is counted once): ``gpu:4``, ``gpu:a100:4(S:0-1)``, several types
    comma-separated; nodes in a state that cannot take work are left out."""
    seen, total = set(), 0
    for line in listed.splitlines():
        name, _, rest = line.partition("|")
        gres, _, state = rest.partition("|")
        if not name or name in seen or state.strip().rstrip("*~#!%$@^-").startswith(UNAVAILABLE):
            continue
        seen.add(name)
        for item in gres.split(","):
            parts = item.split("(")[0].split(":")
            if parts[0] == "gpu" and len(parts) >= 2 and parts[-1].isdigit():
                total += int(parts[-1])
    return total
