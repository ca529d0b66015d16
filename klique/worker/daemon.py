"""The daemon's loop: enrol, then each tick follow the work, send what is due (reports first, in
order, then the heartbeat and its commands, then a claim when GPUs are free) in one ``sync``
round trip, and sleep until the next tick or until something wakes it: a process of its own
ending (a runner with ``on_change``) or the waker thread, which long-polls ``wait`` while GPUs
are free and hears at once when work is placed in the pool. A control plane without ``sync``
(404) gets the separate calls from then on; one without ``wait`` leaves the loop to its polling.

``Daemon`` holds the state and runs the loop; what it does is split by concern, each a part of
it: enrolment and adoption at start (enrolment.py), the round trips with the control plane
(sync.py), the queue of reports (reports.py), claims and the waker (claims.py), the work it holds
(work.py), the GPUs it serves and books (booking.py), the checkpoints its work reports
(checkpoints.py) and shutting down (shutdown.py).
"""

import logging
import random
import threading
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from klique.worker import sessions
from klique.worker import slots as gpu_slots
from klique.worker.booking import Booking
from klique.worker.checkpoints import Checkpoints
from klique.worker.claims import Claiming
from klique.worker.client import ControlPlane, Refused, Unreachable, Untrusted
from klique.worker.enrolment import Enrolment
from klique.worker.reports import Report, Reporting
from klique.worker.shutdown import ShuttingDown
from klique.worker.starts import Starter
from klique.worker.sync import Syncing
from klique.worker.work import Held, Holding

log = logging.getLogger("klique.worker")


@dataclass
class Settings:
    hostname: str
    enrolment_token: str
    devices: list[str]
    poll_min_s: float = 1.0
    poll_max_s: float = 10.0
    retry_max_s: float = 30.0
    tick_s: float = 0.5  # the longest sleep between two ticks; a wake-up ends it sooner
    wait_s: float = 10.0  # how long one ``wait`` long-poll lasts at most; 0: no waker thread
    max_claim: int = 100  # the most one claim may take (the server's bound); it takes what fits
    shutdown_grace_s: float = 30.0
    keep_work_on_exit: bool = False
    session_host: str = "127.0.0.1"  # where session servers bind (sessions.py)
    alive_file: str = ""  # touched after each tick (at most every ALIVE_EVERY_S): a liveness probe's


ALIVE_EVERY_S = 5.0
# The least time between the starts of two ticks when wake-ups come thick and fast (many short
# tasks ending): at most about 8 syncs a second, below the server's sync throttle (600/min).
MIN_TICK_GAP_S = 0.12


class Daemon(Enrolment, Syncing, Reporting, Claiming, Holding, Booking, ShuttingDown, Checkpoints):
    def __init__(
        self,
        settings: Settings,
        client: ControlPlane,
        runner,
        *,
        nvml=None,
        clock=time.monotonic,
        rng: random.Random | None = None,
        log_context: dict | None = None,
    ):
        self.settings, self.client, self.runner, self.nvml, self.clock = settings, client, runner, nvml, clock
        # Filled at enrolment (worker_id, pool_id); the JSON log lines carry it (klique.jsonlog).
        self.log_context = log_context if log_context is not None else {}
        self.rng = rng or random.Random()
        self.free = [gpu_slots.WHOLE] * len(settings.devices)
        self.held: dict[int, Held] = {}
        self.orphans: dict[int, Held] = {}  # runs of tasks no longer ours, until they have ended
        self.sessions = sessions.Sessions()  # the session servers of held tasks
        self.tunnel = None  # the session tunnel's agent (klique/tunnel/agent.py), once enrolled with one
        self.reports: deque[Report] = deque()
        self.heartbeat_s = 5.0
        self.claim_max_s = 0.0  # the control plane's longest idle claim interval (0: --poll-max)
        self.next_heartbeat = self.next_claim = 0.0
        self.claim_every = settings.poll_min_s
        self.failures = 0
        self.retry_at = 0.0
        self.draining_since: float | None = None
        self.leaving = False  # shut down with the work left running for the next daemon
        # Work an earlier daemon left here, named at enrolment: task id -> the pool label of its work.
        self.found: dict[int, str] = {}
        self.pool_id = None
        self.syncs = True  # False once the control plane answered sync with 404: separate calls
        self.wake = threading.Event()  # ends the sleep between two ticks
        self.placed = threading.Event()  # the waker heard of placed work: claim at the next tick
        self.roomy = threading.Event()  # GPUs were given back: the waker may wait again
        self.freed = False  # GPUs were given back since the last claim: claim in the next sync
        self.stopping = threading.Event()
        self.alive_at = float("-inf")
        self.observed: int | None = None  # the GPUs the runner sees its pool really has
        self.observe_at = float("-inf")
        self.claim_answers = threading.Condition()
        self.claims_answered = self.claimed_last = 0
        self.waker: threading.Thread | None = None
        self.starter = Starter(runner, self.attempt, self.wake)
        if hasattr(runner, "on_change"):
            runner.on_change = self.wake.set

    # The loop.

    def run(self) -> int:
        """Serve until shut down (SIGTERM) and every task has stopped; 0, 3 when refused, 4 when the
        control plane's certificate is not trusted at enrolment."""
        try:
            self.found = self.runner.recover()
            self.enrol()
            self.start_waker()
            while not self.done():
                self.wake.clear()
                started = time.monotonic()
                self.tick()
                self.touch_alive(started)
                if self.done():
                    break
                if self.wake.wait(self.settings.tick_s) and self.draining_since is None:
                    time.sleep(max(0.0, started + MIN_TICK_GAP_S - time.monotonic()))
        except Refused as error:
            log.error("refused by the control plane; stopping", extra={"fields": {"error": str(error)}})
            self.abandon()
            return 3
        except Untrusted as error:
            fields = {"error": str(error), "hint": "--ca-bundle FILE or SSL_CERT_FILE: the CA that signed it"}
            log.error(
                "cannot enrol: the control plane's certificate is not trusted; stopping",
                extra={"fields": fields},
            )
            return 4
        finally:
            self.stopping.set()
            self.starter.close()
            if self.tunnel is not None:
                self.tunnel.stop()
            with self.claim_answers:
                self.claim_answers.notify_all()
            self.client.close()
        log.info("stopped", extra={"fields": {"reports_unsent": len(self.reports)}})
        return 0

    def touch_alive(self, now: float) -> None:
        """Touch the alive file: the daemon's loop turns (a probe fails it when it goes stale)."""
        if not self.settings.alive_file or now - self.alive_at < ALIVE_EVERY_S:
            return
        self.alive_at = now
        try:
            Path(self.settings.alive_file).touch()
        except OSError as error:
            log.warning("cannot touch the alive file", extra={"fields": {"error": str(error)}})

    def open_tunnel(self, url: str | None) -> None:
        """Keep the session tunnel the control plane named at enrolment open (again, with the new
        token, after enrolling again)."""
        if not url or not getattr(self.runner, "sessions", False):
            return
        if self.tunnel is None:
            from klique.tunnel.agent import Agent

            self.tunnel = Agent(url, lambda: self.client.token, verify=self.client.verify)
            self.tunnel.start()
        else:
            self.tunnel.url = url
            self.tunnel.reconnect()

    def tick(self) -> None:
        now = self.clock()
        self.observe(now)
        self.follow(now)
        self.watch_checkpoints(now)
        if self.tunnel is not None:
            self.tunnel.routes = self.sessions.routes(self.held)
        if now < self.retry_at:
            return
        try:
            if self.syncs:
                self.sync(now)
            else:
                self.exchange(now)
        except Unreachable as error:
            self.retry_at = self.clock() + self.backoff(error)
        except Refused:
            log.warning("token refused; enrolling again (the old work is no longer ours)")
            self.abandon()
            self.enrol()
