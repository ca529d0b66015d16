"""The daemon's round trips with the control plane: what is due (the queued reports, the heartbeat
and its commands, a claim) in one ``sync``, or as separate calls for a control plane without it.

Nothing is lost while the control plane is unreachable: the work keeps running, reports wait in
order and are sent when it answers again, and the daemon retries with exponential backoff and
full jitter. Every report is idempotent on the server, so a retry after a timeout is safe.
"""

import itertools
import logging

from klique.worker.client import Rejected

log = logging.getLogger("klique.worker")

MAX_SYNC_REPORTS = 100  # reports per sync; a longer queue goes in several, one after the other


class Syncing:
    """The exchanges with the control plane and their backoff: a part of ``Daemon`` (daemon.py),
    whose state they use."""

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
