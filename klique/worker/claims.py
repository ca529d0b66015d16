"""The daemon's claims: what a claim asks for (the free GPUs, per slot or as a total), what its
answer starts, how often it asks while idle, and the waker thread, which long-polls ``wait``
while GPUs are free and has the loop claim at once when work is placed in the pool."""

import logging
import random
import threading
import time
from decimal import Decimal

from klique.worker import slots as gpu_slots
from klique.worker.client import Refused, Rejected, Unreachable

log = logging.getLogger("klique.worker")


class Claiming:
    """Claims and the waker: a part of ``Daemon`` (daemon.py), whose state they use."""

    def claim(self, now: float) -> None:
        """Claim what fits the free GPUs (a separate call)."""
        body = self.claim_body(now)
        if body is None:
            return
        try:
            tasks = self.client.claim(body)
        except Rejected as error:
            self.recovered()
            self.claim_refused(error.status, str(error), now)
            return
        self.recovered()
        self.claimed(tasks, now)

    def claim_body(self, now: float) -> dict | None:
        """What a claim asks for, or None: a worker whose every GPU is busy does not ask."""
        self.placed.clear()
        self.freed = False
        if not self.has_room():
            self.next_claim = now + self.settings.poll_min_s
            self.claim_done(0)
            return None
        if self.runner.claims_total:
            # A fraction takes a whole GPU where the scheduler allocates whole GPUs, which the
            # control plane does not know: there, claim one task at a time.
            most = 1 if getattr(self.runner, "whole_gpus", False) else self.settings.max_claim
            body = {"free_gpus": self.free_gpus(), "max_tasks": most}
        else:
            shares = [str(Decimal(left) / gpu_slots.WHOLE) for left in self.free]
            body = {"slots": shares, "max_tasks": self.settings.max_claim}
        if self.runner.multi_node:
            body["multi_node"] = True
        return body

    def claim_refused(self, status, error: str, now: float) -> None:
        if status == 409:
            # A lost worker is refused work until it heartbeats again: heartbeat now.
            log.warning("claim refused (409): marked lost", extra={"fields": {"error": error}})
            self.next_heartbeat = 0.0
            self.next_claim = now + self.settings.poll_min_s
        else:
            log.error("claim rejected", extra={"fields": {"error": error}})
            self.next_claim = now + self.settings.poll_max_s
        self.claim_done(0)

    def claimed(self, tasks: list[dict], now: float) -> None:
        """Start what the claim handed out; poll less often while there is nothing to claim."""
        for task in tasks:
            self.launch(task, now)
        if tasks:
            self.claim_every = self.settings.poll_min_s
            self.wake.set()  # look at the new work at once: its start is reported in the next tick
        else:
            # Idle: ask less often, down to --poll-max, or to what a large estate's control plane
            # asks for (``claim_max_s``, its heartbeat interval: each heartbeat claims too).
            self.claim_every = min(self.claim_every * 2, max(self.settings.poll_max_s, self.claim_max_s))
        self.next_claim = now + self.claim_every * self.rng.uniform(0.8, 1.2)
        if self.claim_max_s > self.settings.poll_max_s and self.claim_every >= self.claim_max_s:
            self.next_claim = max(self.next_claim, self.next_heartbeat)  # it rides the next heartbeat
        self.claim_done(len(tasks))

    def claim_done(self, count: int) -> None:
        """Tell the waker what the claim it may be waiting on got."""
        with self.claim_answers:
            self.claims_answered += 1
            self.claimed_last = count
            self.claim_answers.notify_all()

    def start_waker(self) -> None:
        if self.settings.wait_s > 0 and self.waker is None and self.draining_since is None:
            self.waker = threading.Thread(target=self.waken, name="klique-worker-waker", daemon=True)
            self.waker.start()

    def waken(self) -> None:
        """The waker thread: while GPUs are free, long-poll ``wait`` and, when work is placed in
        the pool, have the loop claim at once. When that claim gets nothing (the work does not
        fit here, or another daemon took it) it waits the claim interval before waiting again, so
        work that fits nowhere here does not keep it asking. Errors back off as the loop does; a
        control plane without ``wait`` (404) stops it, and the loop polls as before."""
        rng, failures, timeout_s = random.Random(), 0, self.settings.wait_s
        while not self.stopping.is_set() and self.draining_since is None:
            if not self.has_room():
                self.roomy.clear()
                if not self.has_room():
                    self.roomy.wait(self.settings.poll_max_s)
                continue
            asked = time.monotonic()
            try:
                placed = self.client.wait(timeout_s)
            except Rejected as error:
                fields = {"error": str(error)}
                if error.status == 404:
                    log.info("the control plane cannot wake this daemon: polling", extra={"fields": fields})
                    return
                if error.status == 400 and timeout_s > 1:
                    timeout_s = max(1.0, timeout_s / 2)  # above the control plane's WORKER_WAIT_MAX_S
                    continue
                self.stopping.wait(self.settings.poll_min_s)  # 409, lost: the loop heartbeats
                continue
            except (Unreachable, Refused) as error:
                failures += 1
                if not self.stopping.is_set():
                    log.debug("wait failed", extra={"fields": {"error": str(error)}})
                self.stopping.wait(rng.uniform(0, self.backoff_cap(failures)))
                continue
            failures = 0
            if not placed:
                if time.monotonic() - asked < timeout_s / 2:  # the control plane does not hold waits
                    self.stopping.wait(max(self.claim_every, self.settings.poll_min_s))
                continue
            if not self.claim_placed():
                self.stopping.wait(max(self.claim_every, self.settings.poll_min_s))

    def claim_placed(self) -> int:
        """Have the loop claim now and wait for its answer: how many tasks it got."""
        with self.claim_answers:
            before = self.claims_answered
            self.placed.set()
            self.wake.set()
            self.claim_answers.wait_for(
                lambda: self.claims_answered > before or self.stopping.is_set(),
                timeout=self.settings.poll_max_s,
            )
            return self.claimed_last if self.claims_answered > before else 0
