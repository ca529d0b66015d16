"""The daemon's loop: enrol, then each tick follow the work, send what is due (reports first, in
order, then the heartbeat and its commands, then a claim when GPUs are free) in one ``sync``
round trip, and sleep until the next tick or until something wakes it: a process of its own
ending (a runner with ``on_change``) or the waker thread, which long-polls ``wait`` while GPUs
are free and hears at once when work is placed in the pool. A control plane without ``sync``
(404) gets the separate calls from then on; one without ``wait`` leaves the loop to its polling.

Nothing is lost while the control plane is unreachable: the work keeps running, reports wait in
order and are sent when it answers again, and the daemon retries with exponential backoff and
full jitter. Every report is idempotent on the server, so a retry after a timeout is safe.

A report the control plane refuses (a 4xx other than 401) is not dropped: it is sent again
reduced (``Report.reduced``: without its log tail and details, then without its time) and only
given up when nothing is left to leave out, so an exit is recorded and finished work never runs
again. Work that cannot be started anywhere (its command is above the argument limit, sbatch
refuses the job) is reported as ``start_failed``, with the error: the control plane tries it again
a few times, then fails it with that reason. A start error of this host (a full disk, no file
descriptors, sbatch timing out) hands the work back as ``stopped``, so it is requeued without
using up an attempt (``runs.start_failure`` decides which).

A daemon that starts again (after a crash, an upgrade) asks its runner what work an earlier daemon
left running here and names it when it enrols: the control plane hands back the tasks it still
counts as that host's (``adopted``) and the daemon follows them as its own, on the GPUs they were
claimed on, while the runner removes the rest of this pool's (Kubernetes pods and Docker containers
outlive their daemon; processes and Slurm jobs are stopped at start, as before). Work labelled
with another pool, whose daemon shares this hostname, is left alone. With ``keep_work_on_exit`` a
SIGTERM leaves the work running for the next daemon to adopt instead of stopping it; it must come
back within the heartbeat timeout, or the control plane requeues that work and the next daemon
removes it.

Where the pool's scheduler picks the GPUs (``claims_total``) a task's GPUs are booked out of the
free total (``slots.take_total``), so the free total the daemon claims with always falls by what
the control plane handed it. A kill that does not end the work is sent again every
``poll_max_s`` until the runner reports the work gone.

A task that is no longer this daemon's (``orphaned``: requeued while the daemon was lost, say) is
stopped and forgotten without a report. If the control plane hands the same task back before
that run has ended, the new run waits for it: one run of a task at a time, in its folder and its
checkpoint directory, and no report of the old run lands on the new claim.

A claimed task with a ``session`` object runs a notebook or IDE server (``sessions.Sessions``):
the daemon builds its command on a free port, reports its URL once it answers and what it measures
in each heartbeat (``sessions``); the control plane decides when it is idle and stops it as any task.
"""

import itertools
import logging
import random
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from klique.worker import sessions
from klique.worker import slots as gpu_slots
from klique.worker.client import ControlPlane, Refused, Rejected, Unreachable, Untrusted
from klique.worker.runs import StartFailed, utc_now
from klique.worker.starts import Starter
from klique.worker.text import storable

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

    @property
    def slots(self) -> list[int]:
        return list(self.taken)


MAX_ERROR_CHARS = 1000
ALIVE_EVERY_S = 5.0
# How often a runner that can see its pool's GPUs (``observed_gpus``: Kubernetes nodes, Slurm's
# GRES) is asked; the daemon serves no more than it sees.
OBSERVE_EVERY_S = 60.0
MAX_SYNC_REPORTS = 100  # reports per sync; a longer queue goes in several, one after the other
# The least time between the starts of two ticks when wake-ups come thick and fast (many short
# tasks ending): at most about 8 syncs a second, below the server's sync throttle (600/min).
MIN_TICK_GAP_S = 0.12
# What a report must carry for the control plane to act on it; anything else may be left out.
ESSENTIAL = {"exited": ("exit_code",)}


@dataclass
class Report:
    task_id: int
    what: str
    body: dict = field(default_factory=dict)

    def reduced(self) -> "Report | None":
        """This report with less in it, after the control plane refused it: first only what is
        essential and its time, then only what is essential; None once nothing is left to leave
        out (and for a log update, which carries nothing else)."""
        if self.what == "log":
            return None
        essential = ESSENTIAL.get(self.what, ())
        for keep in ((*essential, "at"), essential):
            body = {name: value for name, value in self.body.items() if name in keep}
            if body != self.body:
                return Report(self.task_id, self.what, body)
        return None


class Daemon:
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
            with self.claim_answers:
                self.claim_answers.notify_all()
            self.client.close()
        log.info("stopped", extra={"fields": {"reports_unsent": len(self.reports)}})
        return 0

    def observe(self, now: float) -> None:
        """Ask the runner, at most every ``OBSERVE_EVERY_S``, how many GPUs its pool really has."""
        probe = getattr(self.runner, "observed_gpus", None)
        if probe is None or now < self.observe_at:
            return
        self.observe_at = now + OBSERVE_EVERY_S
        seen = probe()
        if seen is not None and seen != self.observed:
            fields = {"observed": seen, "declared": len(self.settings.devices)}
            log.info("GPUs seen in the pool", extra={"fields": fields})
        self.observed = seen

    def serving(self) -> int:
        """The GPUs this daemon serves: its ``--gpus`` (or NVML's), never more than the runner sees."""
        declared = len(self.free)
        return declared if self.observed is None else max(0, min(declared, self.observed))

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
        followed = []
        for task in tasks:
            try:
                size = self.size(task)
            except ValueError as error:
                fields = {"task": task.get("id"), "error": str(error)}
                log.error("cannot follow an adopted task; removing its work", extra={"fields": fields})
                continue
            self.held[task["id"]] = Held(task, self.book(task, size), size, started=True)
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

    def touch_alive(self, now: float) -> None:
        """Touch the alive file: the daemon's loop turns (a probe fails it when it goes stale)."""
        if not self.settings.alive_file or now - self.alive_at < ALIVE_EVERY_S:
            return
        self.alive_at = now
        try:
            Path(self.settings.alive_file).touch()
        except OSError as error:
            log.warning("cannot touch the alive file", extra={"fields": {"error": str(error)}})

    def tick(self) -> None:
        now = self.clock()
        self.observe(now)
        self.follow(now)
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

    def exchange(self, now: float) -> None:
        """What is due by separate calls, for a control plane without ``sync``."""
        self.send_reports()
        if now >= self.next_heartbeat:
            self.heartbeat(now)
        if self.draining_since is None and (now >= self.next_claim or self.placed.is_set()):
            self.claim(now)

    def sync(self, now: float) -> None:
        """What is due in one round trip: the queued reports (in order), the heartbeat when due and
        a claim when due or when work was placed or GPUs freed. A report refused and reduced, or a
        queue longer than one sync takes, goes in another sync at once, as separate reports did.
        Unreachable leaves every report queued (a whole sync is safe to send again); a sync the
        control plane does not know (404) turns to separate calls for good, and one it refuses
        otherwise (a bad heartbeat, say) is sent as separate calls this once."""
        heartbeat = self.heartbeat_body() if now >= self.next_heartbeat else None
        claim = None
        due = now >= self.next_claim or self.placed.is_set() or self.freed
        # Where a large estate's control plane spaces claims out to its heartbeat (``claim_max_s``),
        # a heartbeat with room claims too: one sync, not two.
        along = heartbeat is not None and self.claim_max_s > self.settings.poll_max_s and self.has_room()
        if self.draining_since is None and (due or along):
            claim = self.claim_body(now)
        if not self.reports and heartbeat is None and claim is None:
            return
        while True:
            sent = list(itertools.islice(self.reports, MAX_SYNC_REPORTS))
            body = {
                "reports": [{"task": r.task_id, "what": r.what, "body": r.body} for r in sent],
                "heartbeat": heartbeat,
                "claim": claim,
            }
            try:
                answer = self.client.sync(body)
            except Rejected as error:
                fields = {"error": str(error)}
                if error.status == 404:
                    log.info("no sync on the control plane: separate calls", extra={"fields": fields})
                    self.syncs = False
                else:
                    log.warning("sync refused; sending this one as separate calls", extra={"fields": fields})
                if heartbeat is not None:
                    self.next_heartbeat = now
                if claim is not None:
                    self.next_claim = now
                self.exchange(now)
                return
            self.recovered()
            more = self.take_reports(sent, answer.get("reports") or [])
            if heartbeat is not None:
                self.heartbeat_answered(answer.get("heartbeat") or {}, now)
            if claim is not None:
                error = answer.get("claim_error")
                if error:
                    status = error.get("status")
                    self.claim_refused(status, f"HTTP {status}: {error.get('error')}", now)
                else:
                    self.claimed(answer.get("tasks") or [], now)
            if not more:
                return
            heartbeat = claim = None

    def take_reports(self, sent: list[Report], answers: list) -> bool:
        """Act on the sync's answer to each report sent, in order, as on a separate report's
        answer; stop at the first one it did not answer. True when more is queued to send now."""
        moved = False
        for report, answer in zip(sent, answers, strict=False):
            if not isinstance(answer, dict) or answer.get("task") != report.task_id:
                break
            if not self.reports or self.reports[0] is not report:
                break
            status = answer.get("status")
            if isinstance(status, int) and (status in (408, 429) or status >= 500):
                break  # not this report's fault: it goes again with the next sync
            moved = True
            if status is not None:
                if self.refused(report, f"HTTP {status}: {answer.get('error')}"):
                    break  # the reduced report goes first, then the rest again, in order
                continue
            self.sent(report)
        return moved and bool(self.reports)

    def backoff(self, error: Exception) -> float:
        """Full jitter: the n-th failure in a row waits uniformly in [0, min(retry_max, 2**n)] s.
        The first failure is logged as a warning (the connection lost), the retries at debug."""
        self.failures += 1
        delay = self.rng.uniform(0, self.backoff_cap(self.failures))
        fields = {"error": str(error), "attempt": self.failures, "retry_in_s": round(delay, 1)}
        level = logging.WARNING if self.failures == 1 else logging.DEBUG
        log.log(level, "control plane unreachable", extra={"fields": fields})
        return delay

    def backoff_cap(self, failures: int) -> float:
        return min(self.settings.retry_max_s, 2 ** min(failures, 10))

    def recovered(self) -> None:
        if self.failures:
            log.info("control plane reachable again", extra={"fields": {"after_attempts": self.failures}})
        self.failures = 0

    # The work.

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
                self.queue(held, "started", {"at": change.at or utc_now(), "detail": change.detail})
                log.info("started", extra={"fields": {"task": change.task_id, **change.detail}})
                continue
            self.release_gpus(held)
            held.ended = True
            fields = {
                "task": change.task_id,
                "how": change.kind,
                "exit_code": change.exit_code,
                "stop": held.stop,
            }
            log.info("ended", extra={"fields": fields})
            body = {"at": change.at or utc_now(), "log_tail": storable(self.runner.log_tail(change.task_id))}
            if change.kind == "exited" and not held.stop:
                self.queue(held, "exited", {**body, "exit_code": change.exit_code})
            else:
                self.queue(held, "stopped", body)
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
        if self.sessions.watch(self.held, self.runner, now, self.nvml):
            self.next_heartbeat = now  # a session that has just come up is reported at once

    def queue(self, held: Held, what: str, body: dict) -> None:
        self.reports.append(Report(held.task["id"], what, body))

    def send_reports(self) -> None:
        while self.reports:
            report = self.reports[0]
            try:
                self.client.report(report.task_id, report.what, report.body)
            except Rejected as error:
                self.recovered()
                self.refused(report, str(error))
                continue
            self.recovered()
            self.sent(report)

    def refused(self, report: Report, error: str) -> bool:
        """The first queued report was refused (a 4xx): put it back reduced (True), or give it
        up once nothing is left to leave out."""
        fields = {"task": report.task_id, "report": report.what, "error": error}
        reduced = report.reduced()
        if reduced is not None:
            log.warning("report refused; sending it again reduced", extra={"fields": fields})
            self.reports[0] = reduced
            return True
        log.error("report refused; given up", extra={"fields": fields})
        self.sent(report)
        return False

    def sent(self, report: Report) -> None:
        """The first queued report is done with; a task that ended is forgotten with its last one."""
        self.reports.popleft()
        held = self.held.get(report.task_id)
        if held is not None and held.ended and not any(r.task_id == report.task_id for r in self.reports):
            del self.held[report.task_id]

    def heartbeat_body(self) -> dict:
        body = {"tasks": sorted(self.held), "gpus": str(self.serving()), "free_gpus": self.free_gpus()}
        if self.nvml is not None:
            body["gpu_stats"] = self.nvml.stats()
        running = self.sessions.reports(self.held)
        if running:
            body["sessions"] = running
        return body

    def heartbeat(self, now: float) -> None:
        body = self.heartbeat_body()
        try:
            answer = self.client.heartbeat(body)
        except Rejected as error:
            if "sessions" not in body:
                raise
            # What a session measured must never keep the daemon from heartbeating.
            fields = {"error": str(error)}
            log.error("heartbeat refused; sent again without sessions", extra={"fields": fields})
            answer = self.client.heartbeat({k: v for k, v in body.items() if k != "sessions"})
        self.recovered()
        self.heartbeat_answered(answer, now)

    def heartbeat_answered(self, answer: dict, now: float) -> None:
        self.heartbeat_s = float(answer.get("heartbeat_s", self.heartbeat_s))
        self.claim_max_s = float(answer.get("claim_max_s", self.claim_max_s))
        self.next_heartbeat = now + self.heartbeat_s * self.rng.uniform(0.9, 1.1)
        for command in answer.get("commands", []):
            self.stop(command["stop"], command["reason"], float(command["grace_s"]), now)

    def stop(self, task_id: int, reason: str, grace_s: float, now: float) -> None:
        held = self.held.get(task_id)
        if held is None or held.ended:
            return
        if reason == "orphaned":
            self.orphan(task_id, grace_s, now)
            return
        if held.stop:
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

    def has_room(self) -> bool:
        if self.free and self.observed is not None:
            return Decimal(self.free_gpus()) > 0
        return not self.free or any(self.free)

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

    def launch(self, task: dict, now: float) -> None:
        """Take the claimed task's GPUs and start it, or, while an earlier run of the same task
        still ends here, keep them for it and start it once that run has ended."""
        if task["id"] in self.held:  # handed out afresh: the run we have is not the task's any more
            self.orphan(task["id"], self.settings.shutdown_grace_s, now)
        try:
            size = self.size(task)
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

    def book(self, task: dict, size: int) -> dict[int, int]:
        """Take the task's GPUs out of the free ones: by total where the pool's scheduler picks them,
        else on the slots the claim named (or, when they do not fit, where it fits now)."""
        if self.runner.claims_total:
            return gpu_slots.take_total(self.free, size)
        slots = task.get("slots") or []
        if not self.fits(slots, size):
            slots = gpu_slots.fit(self.free, size) or []
        gpu_slots.take(self.free, slots, size)
        return {index: min(size, gpu_slots.WHOLE) for index in slots}

    def devices(self, held: Held) -> list[str]:
        """The GPUs handed to the runner: none where the pool's scheduler picks them."""
        if self.runner.claims_total:
            return []
        return [self.settings.devices[index] for index in held.slots]

    def fits(self, slots, size: int) -> bool:
        if not isinstance(slots, list) or not all(type(index) is int for index in slots):
            return False
        if not all(0 <= index < len(self.free) for index in slots) or len(set(slots)) != len(slots):
            return False
        if size >= gpu_slots.WHOLE:
            return len(slots) * gpu_slots.WHOLE == size and all(
                self.free[i] == gpu_slots.WHOLE for i in slots
            )
        return (size == 0 and not slots) or (len(slots) == 1 and self.free[slots[0]] >= size)

    def size(self, task: dict) -> int:
        """The milli-GPUs a task takes here: its GPUs per node times its nodes. Where the scheduler
        allocates whole GPUs (Slurm), each node's fraction takes a whole GPU. ValueError when its
        ``gpus`` or ``nodes`` cannot be read."""
        nodes = task.get("nodes", 1)
        if type(nodes) is not int or nodes < 1:
            raise ValueError(f"nodes {nodes!r} is not a whole number of at least 1")
        try:
            per_node = gpu_slots.milli(task.get("gpus"))
        except (TypeError, ValueError, ArithmeticError):
            per_node = -1
        if per_node < 0:
            raise ValueError(f"gpus {task.get('gpus')!r} is not an amount of GPUs")
        if getattr(self.runner, "whole_gpus", False):
            per_node = -(-per_node // gpu_slots.WHOLE) * gpu_slots.WHOLE
        return per_node * nodes

    def release_gpus(self, held: Held) -> None:
        if held.taken:
            self.freed = True
            self.roomy.set()
        gpu_slots.give_back(self.free, held.taken)
        held.taken = {}

    def free_gpus(self) -> str:
        """The GPUs free to claim: of those it serves (``serving``), those no task holds."""
        free = sum(self.free)
        if self.observed is not None:
            held = len(self.free) * gpu_slots.WHOLE - free
            free = max(0, min(free, self.serving() * gpu_slots.WHOLE - held))
        return str(Decimal(free) / gpu_slots.WHOLE)

    # Shutting down.

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
