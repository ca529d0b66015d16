"""The work the daemon holds: each claimed task's start (in a thread of its own where the runner
allows), what its runner reports of it turned into reports, its stop, and its kill when the
grace is over; a kill that does not end the work is sent again every ``poll_max_s`` until the
runner reports the work gone.

Work that cannot be started anywhere (its command is above the argument limit, sbatch refuses
the job) is reported as ``start_failed``, with the error: the control plane tries it again a few
times, then fails it with that reason. A start error of this host (a full disk, no file
descriptors, sbatch timing out) hands the work back as ``stopped``, so it is requeued without
using up an attempt (``runs.start_failure`` decides which).

A task that is no longer this daemon's (``orphaned``: requeued while the daemon was lost, say) is
stopped and forgotten without a report. If the control plane hands the same task back before
that run has ended, the new run waits for it: one run of a task at a time, in its folder and its
checkpoint directory, and no report of the old run lands on the new claim.

A claimed task with a ``session`` object runs a notebook or IDE server (``sessions.Sessions``):
the daemon builds its command on a free port, reports its URL once it answers and what it measures
in each heartbeat (``sessions``); the control plane decides when it is idle and stops it as any task.

A task with a time limit (the claim's ``time_limit_s``: the running seconds it has left) is stopped
by the daemon itself once it has run that long, counted from its start, whether or not the control
plane answers: SIGTERM, then SIGKILL after its grace, as a preemption; its end is reported as an
exit with ``timed_out``. Where the pool's scheduler enforces the limit (``limits_time``: Slurm's
``--time``) the daemon only reports the end the scheduler made.
"""

import logging
from collections import deque
from dataclasses import dataclass

from klique.worker.runs import StartFailed, time_limit_s, utc_now
from klique.worker.text import storable

log = logging.getLogger("klique.worker")

MAX_ERROR_CHARS = 1000


@dataclass
class Held:
    """A task this daemon holds: running, being stopped, or ended with its report not yet sent."""

    task: dict
    taken: dict[int, int]  # the milli-GPUs booked on each GPU slot, given back when it ends
    size: int
    started: bool = False
    stop: str = ""
    kill_at: float | None = None
    killed: bool = False
    kill_again_at: float | None = None
    ended: bool = False
    waiting: bool = False  # claimed again while an orphaned run of the same task still ends
    starting: bool = False  # its start runs in a thread of its own (klique/worker/starts.py)
    limit_at: float | None = None  # when it reaches its time limit, on the daemon's clock
    timed_out: bool = False  # stopped by the daemon at its time limit

    @property
    def slots(self) -> list[int]:
        return list(self.taken)


class Holding:
    """The held work: a part of ``Daemon`` (daemon.py), whose state it uses."""

    def follow(self, now: float) -> None:
        """Turn what the runner saw into reports; SIGKILL what outlived its grace; start the runs
        that waited for an orphaned run of the same task to end."""
        for held, failure in self.starter.finished():
            self.start_returned(held, failure, now)
        for change in self.runner.poll():
            orphan = self.orphans.get(change.task_id)
            if orphan is not None:
                if change.kind != "running":
                    self.release_gpus(orphan)
                    del self.orphans[change.task_id]
                    log.info("orphan ended", extra={"fields": {"task": change.task_id, "how": change.kind}})
                continue
            held = self.held.get(change.task_id)
            if held is None or held.ended:
                continue
            if change.kind == "failed":
                self.release_gpus(held)
                held.ended = True
                error = storable(str(change.detail.get("error", "")))[:MAX_ERROR_CHARS]
                log.error("cannot run", extra={"fields": {"task": change.task_id, "error": error}})
                self.queue(held, "start_failed", {"at": utc_now(), "error": error})
                continue
            if change.kind == "running":
                held.started = True
                self.time_from(held, now)
                self.queue(held, "started", {"at": change.at or utc_now(), "detail": change.detail})
                log.info("started", extra={"fields": {"task": change.task_id, **change.detail}})
                continue
            self.release_gpus(held)
            held.ended = True
            timed_out = held.timed_out or (change.timed_out and not held.stop)
            fields = {
                "task": change.task_id,
                "how": change.kind,
                "exit_code": change.exit_code,
                "stop": held.stop or ("time_limit" if timed_out else ""),
            }
            log.info("ended", extra={"fields": fields})
            body = {"at": change.at or utc_now(), "log_tail": storable(self.runner.log_tail(change.task_id))}
            if timed_out:
                # Stopped at its limit: an exit whatever the runner saw (143: as SIGTERM ends it).
                code = 143 if change.exit_code is None else change.exit_code
                self.queue(held, "exited", {**body, "exit_code": code, "timed_out": True})
            elif change.kind == "exited" and not held.stop:
                self.queue(held, "exited", {**body, "exit_code": change.exit_code})
            else:
                self.queue(held, "stopped", body)
        self.stop_timed_out(now)
        for task_id, held in [*self.orphans.items(), *self.held.items()]:
            if held.waiting or held.starting or held.ended or held.kill_at is None or now < held.kill_at:
                continue
            if held.killed:
                # A kill that did not end the work (the runner's delete failed): send it again.
                if now >= held.kill_again_at:
                    held.kill_again_at = now + self.settings.poll_max_s
                    log.warning(
                        "still running after a kill, killing again", extra={"fields": {"task": task_id}}
                    )
                    self.runner.kill(task_id)
                continue
            held.killed, held.kill_again_at = True, now + self.settings.poll_max_s
            log.warning("grace over, killing", extra={"fields": {"task": task_id}})
            self.runner.kill(task_id)
        for task_id, held in list(self.held.items()):
            if held.waiting and task_id not in self.orphans:
                held.waiting = False
                if held.stop:  # stopped before it could start: nothing ran
                    self.release_gpus(held)
                    held.ended = True
                    self.queue(held, "stopped", {"at": utc_now(), "log_tail": ""})
                else:
                    self.start(held)
        moved = self.tunnel.moved if self.tunnel is not None else None
        if self.sessions.watch(self.held, self.runner, now, self.nvml, moved):
            self.next_heartbeat = now  # a session that has just come up is reported at once

    def time_from(self, held: Held, now: float) -> None:
        """Start the task's time limit timer (its work runs from ``now``), unless the pool's
        scheduler enforces the limit itself."""
        limit = time_limit_s(held.task)  # read at launch: a bad one never started
        if limit is not None and not getattr(self.runner, "limits_time", False):
            held.limit_at = now + limit

    def stop_timed_out(self, now: float) -> None:
        """Stop the work that has reached its time limit, as a preemption is stopped (SIGTERM, then
        SIGKILL after its grace); its end is reported as an exit that timed out."""
        for task_id, held in self.held.items():
            if held.limit_at is None or now < held.limit_at or held.timed_out or held.stop or held.ended:
                continue
            held.timed_out = True
            grace = (held.task.get("runtime") or {}).get("grace_s")
            grace = self.settings.shutdown_grace_s if grace is None else float(grace)
            held.kill_at = now + grace
            log.info("time limit reached, stopping", extra={"fields": {"task": task_id, "grace_s": grace}})
            self.runner.terminate(task_id, grace)

    def stop(self, task_id: int, reason: str, grace_s: float, now: float) -> None:
        held = self.held.get(task_id)
        if held is None or held.ended:
            return
        if reason == "orphaned":
            self.orphan(task_id, grace_s, now)
            return
        if held.stop:
            return
        if held.timed_out:  # already stopped at its limit, with its grace: it ends timed out
            return
        held.stop, held.kill_at = reason, now + grace_s
        log.info("stopping", extra={"fields": {"task": task_id, "reason": reason, "grace_s": grace_s}})
        if not held.waiting and not held.starting:  # else it is stopped once its run begins
            self.runner.terminate(task_id, grace_s)

    def orphan(self, task_id: int, grace_s: float, now: float) -> None:
        """The task is no longer ours: stop its run (if it was being stopped already, within the
        grace it had) and never report it, since a report would land on the task's next claim."""
        held = self.held.pop(task_id)
        self.sessions.pop(task_id, None)
        log.info("orphaned", extra={"fields": {"task": task_id, "grace_s": grace_s}})
        if held.ended:  # its run is over; what is left to say about it is no longer ours to say
            self.reports = deque(r for r in self.reports if r.task_id != task_id)
            return
        if held.waiting:  # never started: give its GPUs back
            self.release_gpus(held)
            return
        self.orphans[task_id] = held
        if not held.stop:
            held.kill_at = now + grace_s
            if not held.starting:
                self.runner.terminate(task_id, grace_s)
        held.stop = "orphaned"

    def launch(self, task: dict, now: float) -> None:
        """Take the claimed task's GPUs and start it, or, while an earlier run of the same task
        still ends here, keep them for it and start it once that run has ended."""
        if task["id"] in self.held:  # handed out afresh: the run we have is not the task's any more
            self.orphan(task["id"], self.settings.shutdown_grace_s, now)
        try:
            size = self.size(task)
            time_limit_s(task)
        except ValueError as error:
            held = self.held[task["id"]] = Held(task, {}, 0, ended=True)
            log.error("cannot read the task", extra={"fields": {"task": task["id"], "error": str(error)}})
            message = storable(f"klique-worker could not read this task: {error}")[:MAX_ERROR_CHARS]
            self.queue(held, "start_failed", {"at": utc_now(), "error": message})
            return
        held = Held(task, self.book(task, size), size, waiting=task["id"] in self.orphans)
        self.held[task["id"]] = held
        devices = self.devices(held)
        log.info(
            "claimed",
            extra={
                "fields": {
                    "task": task["id"],
                    "gpus": task["gpus"],
                    "devices": ",".join(devices),
                    "waits_for_old_run": held.waiting or None,
                }
            },
        )
        if not held.waiting:
            self.start(held)

    def start(self, held: Held) -> None:
        """Start the task: in a thread of its own where the runner allows (``Starter``), else here."""
        devices = self.devices(held)
        if self.starter.concurrent and held.task.get("session") is None:
            held.starting = True
            self.starter.submit(held, devices)
            return
        failure = self.attempt(held, devices)
        if failure is not None:
            self.start_failed(held, failure)

    def attempt(self, held: Held, devices: list[str]) -> StartFailed | None:
        """The runner's start (or the session's): its failure, or None. Touches no daemon state."""
        task = held.task
        try:
            if task.get("session") is None:
                self.runner.start(task, devices)
            else:
                host, hostname = self.settings.session_host, self.settings.hostname
                self.sessions.start(task, devices, self.runner, host=host, hostname=hostname)
            return None
        except StartFailed as error:
            return error
        except Exception as error:
            # Whatever a task holds, it must never take the daemon (and every task it runs) down:
            # what the runner cannot handle is the task's own fault, so it recurs.
            log.exception("could not handle the task", extra={"fields": {"task": task["id"]}})
            return StartFailed(f"klique-worker could not handle this task: {error!r}", recurs=True)

    def start_failed(self, held: Held, failure: StartFailed) -> None:
        log.error("could not start", extra={"fields": {"task": held.task["id"], "error": str(failure)}})
        self.release_gpus(held)
        held.ended = True
        if failure.recurs:
            what, body = "start_failed", {"error": storable(str(failure))[:MAX_ERROR_CHARS]}
        else:
            what, body = "stopped", {"log_tail": storable(f"klique-worker could not start it: {failure}")}
        self.queue(held, what, {"at": utc_now(), **body})

    def start_returned(self, held: Held, failure: StartFailed | None, now: float) -> None:
        """A start from a thread has returned: what happened to the task meanwhile (stopped,
        orphaned, abandoned) is done to its run now."""
        held.starting = False
        task_id = held.task["id"]
        if self.held.get(task_id) is held:
            if failure is not None:
                self.start_failed(held, failure)
            elif held.stop:
                self.runner.terminate(task_id, max(0.0, (held.kill_at or now) - now))
        elif self.orphans.get(task_id) is held:
            if failure is not None:
                self.release_gpus(held)
                del self.orphans[task_id]
            else:
                self.runner.terminate(task_id, max(0.0, (held.kill_at or now) - now))
        elif failure is None:
            self.runner.kill(task_id)  # abandoned while it started: no longer ours
