"""The daemon's end: SIGTERM stops every task and the daemon leaves once their reports are sent;
a control plane that no longer knows the daemon has it kill every task at once.

With ``keep_work_on_exit`` a SIGTERM leaves the work running for the next daemon to adopt instead
of stopping it; it must come back within the heartbeat timeout, or the control plane requeues
that work and the next daemon removes it.
"""

import logging

from klique.worker import slots as gpu_slots

log = logging.getLogger("klique.worker")


class ShuttingDown:
    """Shutdown and abandon: a part of ``Daemon`` (daemon.py), whose state they use."""

    def shutdown(self) -> None:
        """SIGTERM: claim nothing more, stop every task (each is requeued) and leave when done."""
        if self.draining_since is not None:
            return
        now = self.clock()
        self.draining_since = now
        self.roomy.set()
        if self.settings.keep_work_on_exit:
            self.leaving = True
            fields = {"tasks": len(self.held)}
            log.info("shutting down: work left running for the next daemon", extra={"fields": fields})
            self.wake.set()
            return
        log.info("shutting down: stopping every task", extra={"fields": {"tasks": len(self.held)}})
        grace = self.settings.shutdown_grace_s
        for task_id, held in self.held.items():
            if not held.ended and not held.stop:
                held.stop, held.kill_at = "shutdown", now + grace
                if not held.waiting and not held.starting:
                    self.runner.terminate(task_id, grace)
        self.wake.set()

    def done(self) -> bool:
        return self.draining_since is not None and self.drained()

    def drained(self) -> bool:
        if not self.reports and (self.leaving or (not self.held and not self.orphans)):
            return True
        return self.clock() - self.draining_since > self.settings.shutdown_grace_s + 30

    def abandon(self) -> None:
        """Kill every task at once: the control plane no longer counts them as ours."""
        for task_id, held in [*self.orphans.items(), *self.held.items()]:
            if not held.ended and not held.waiting and not held.starting:
                self.runner.kill(task_id)
        self.held.clear()
        self.orphans.clear()
        self.sessions.clear()
        self.reports.clear()
        self.free = [gpu_slots.WHOLE] * len(self.settings.devices)
