"""The engine in one process, for the embedded default without Redis: each interval, the pass,
the budget meter, the worker sweep, due schedules and the sessions' idle limits; the usage
rollups once a minute and the cloud pools' autoscaler every AUTOSCALE_INTERVAL_S.

Between intervals it waits for a pass request (``apps.tasks.wake``: a submit, a cancel, a report
that frees GPUs) and runs a pass at once, alone; the interval stays the upper bound.

Several may run (on one machine or several): the one holding the leader lock works, the others
stand by and the first to take the lock after it dies carries on (``apps.engine.leader``)."""

import logging
import signal
import threading
import time

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections
from django.utils import timezone

from apps.cloud import services as cloud
from apps.engine import services
from apps.engine.leader import STANDBY_POLL_S, Leadership
from apps.ledger import rollups
from apps.sessions import services as sessions
from apps.tasks import services as tasks
from apps.tasks import wake
from apps.workers import services as protocol

log = logging.getLogger("klique.engine")
ROLLUP_EVERY_S = 60


class Command(BaseCommand):
    help = "Run the compute policy engine in this process (pass + meter + sweeps every interval)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--interval",
            type=float,
            default=settings.ENGINE_PASS_INTERVAL_S,
            help="seconds between passes (default ENGINE_PASS_INTERVAL_S, 1)",
        )
        parser.add_argument(
            "--passes", type=int, default=0, help="stop after this many passes (0: run forever)"
        )

    def handle(self, *args, interval: float, passes: int, **options):
        stopping = []
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
        done, last_rollup, last_autoscale = 0, 0.0, None
        next_tick = time.monotonic()
        self.stdout.write(f"Klique engine: a pass every {interval:g} s and on request (Ctrl-C to stop)")
        leadership = Leadership()
        try:
            while not stopping and (passes == 0 or done < passes):
                tick = time.monotonic()
                close_old_connections()
                # The leader's lock is checked once a tick (a query), not before every pass on request.
                if (tick >= next_tick or not leadership.leading) and not leadership.hold():
                    next_tick = tick
                    time.sleep(STANDBY_POLL_S)
                    continue
                if tick >= next_tick:
                    next_tick = tick + interval
                    try:
                        self.tick(tick - last_rollup >= ROLLUP_EVERY_S)
                        if tick - last_rollup >= ROLLUP_EVERY_S:
                            last_rollup = tick
                    except Exception:
                        log.exception("engine tick failed; retrying at the next interval")
                    if last_autoscale is None or tick - last_autoscale >= settings.AUTOSCALE_INTERVAL_S:
                        last_autoscale = tick
                        self.autoscale()
                else:
                    try:
                        self.log_pass(services.run_pass())
                    except Exception:
                        log.exception("engine pass on request failed; retrying at the next interval")
                done += 1
                if stopping or (passes and done >= passes):
                    break
                wake.wait_for_request(next_tick - time.monotonic())
        except KeyboardInterrupt:
            pass
        finally:
            leadership.release()
        self.stdout.write("Klique engine stopped")

    def autoscale(self) -> None:
        """The cloud pools' pass; its failure never stops the engine's."""
        try:
            summary = cloud.autoscale()
        except Exception:
            log.exception("autoscale failed; retrying at the next interval")
            return
        for pool, done in summary.items():
            if any(done.get(key) for key in ("launched", "enrolled", "released", "ended", "error")):
                log.info("autoscale %s: %s", pool, done)

    def tick(self, with_rollup: bool) -> None:
        now = timezone.now()
        protocol.sweep(now)
        record = services.run_pass()
        services.run_meter()
        tasks.submit_due_schedules(now)
        sessions.check_idle(now)
        if with_rollup:
            rollups.refresh(now)
        self.log_pass(record)

    def log_pass(self, record) -> None:
        if record.placed or record.preempted:
            log.info(
                "pass: placed %s, preempted %s, waiting %s, %.1f ms",
                record.placed,
                record.preempted,
                record.waiting,
                record.duration_ms,
            )
