"""The daemon's start: enrolment, and the work an earlier daemon left here.

A daemon that starts again (after a crash, an upgrade) asks its runner what work an earlier daemon
left running here and names it when it enrols: the control plane hands back the tasks it still
counts as that host's (``adopted``) and the daemon follows them as its own, on the GPUs they were
claimed on, while the runner removes the rest of this pool's (Kubernetes pods and Docker containers
outlive their daemon; processes and Slurm jobs are stopped at start, as before). Work labelled
with another pool, whose daemon shares this hostname, is left alone.
"""

import logging
import time
from decimal import Decimal

from klique.worker.client import Refused, Rejected, Unreachable, Untrusted
from klique.worker.runs import time_limit_s
from klique.worker.work import Held

log = logging.getLogger("klique.worker")


class Enrolment:
    """``enrol`` and ``adopt``: a part of ``Daemon`` (daemon.py), whose state they use."""

    def enrol(self) -> None:
        self.observe(self.clock())
        gpus = str(Decimal(self.serving()))
        while True:
            try:
                answer = self.client.enrol(
                    self.settings.enrolment_token,
                    hostname=self.settings.hostname,
                    gpus=gpus,
                    mode=self.runner.mode,
                    running=sorted(self.found),
                )
            except Untrusted:
                raise  # a wrong CA or server name: retrying will not help (once enrolled it does)
            except Unreachable as error:
                self.wait(self.backoff(error))
                if self.draining_since is not None:
                    return  # shut down before it could enrol: nothing ran, nothing to report
                continue
            except Rejected as error:
                raise Refused(str(error)) from error
            self.heartbeat_s = float(answer["heartbeat_s"])
            self.claim_max_s = float(answer.get("claim_max_s", 0))
            self.pool_id = answer.get("pool_id")
            self.log_context.update(worker_id=answer["worker"], pool_id=self.pool_id)
            self.recovered()
            self.adopt(answer.get("adopted") or [])
            self.open_tunnel(answer.get("tunnel"))
            log.info(
                "enrolled",
                extra={"fields": {"worker": answer["worker"], "pool": answer["pool"], "gpus": gpus}},
            )
            return

    def adopt(self, tasks: list[dict]) -> None:
        """Follow the tasks the control plane handed back at enrolment as running here; have the
        runner remove the rest of what it found of this pool (or of no pool), never another
        pool's. A task the daemon cannot read is not followed but removed: left out of the next
        heartbeat, it goes back to its queue."""
        followed, now = [], self.clock()
        for task in tasks:
            try:
                size = self.size(task)
                time_limit_s(task)
            except ValueError as error:
                fields = {"task": task.get("id"), "error": str(error)}
                log.error("cannot follow an adopted task; removing its work", extra={"fields": fields})
                continue
            held = self.held[task["id"]] = Held(task, self.book(task, size), size, started=True)
            self.time_from(held, now)  # its time_limit_s is what is left of this run's limit
            followed.append(task)
        adopted = {task["id"] for task in followed}
        ours = ("", str(self.pool_id))
        drop = [
            task_id for task_id, pool in sorted(self.found.items()) if task_id not in adopted and pool in ours
        ]
        if self.found:
            others = sorted(set(self.found) - adopted - set(drop))
            fields = {"tasks": sorted(adopted), "removed": drop, "other_pools": others}
            log.info("adopted work left running", extra={"fields": fields})
        self.runner.adopt(followed, drop)
        self.found = {}

    def wait(self, seconds: float) -> None:
        """Sleep, but wake within a tick of a shutdown."""
        end = time.monotonic() + seconds
        while self.draining_since is None and time.monotonic() < end:
            time.sleep(min(self.settings.tick_s, max(0.0, end - time.monotonic())))
