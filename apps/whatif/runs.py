"""Run a what-if run (docs/whatif.md, "Runs"): export its period, replay both sides with
progress, and store the comparison or the error; and fail the runs whose job died. The Celery task
(``tasks.run_whatif``) or, on the embedded default, a thread of the web process calls it. The groups
the change made no difference to are explained (``held``) before the run is done."""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import connections
from django.utils import timezone

from apps.engine.core.scenario_model import ScenarioError
from apps.engine.core.whatif import compare
from apps.engine.core.whatif_changes import WhatIfError
from apps.engine.export import ExportError, export
from apps.whatif import held
from apps.whatif.models import WhatIfRun

log = logging.getLogger(__name__)
EXPORT_SHARE = 0.05
PROGRESS_EVERY_S = 1.0


def run_in_thread(pk: int) -> None:
    try:
        execute(pk)
    finally:
        connections.close_all()  # this thread's own connections: nothing else would close them


def execute(pk: int) -> None:
    """Run the run ``pk`` if it is queued: export its period, replay both sides with progress, and
    store the report or the error. Only a queued run is taken, so a job delivered twice (a broker
    redelivery) runs it once; a run whose job died is marked failed by ``fail_stale_runs``."""
    now = timezone.now()
    claimed = WhatIfRun.objects.filter(pk=pk, state=WhatIfRun.State.QUEUED).update(
        state=WhatIfRun.State.RUNNING, started_at=now, updated_at=now, progress=0.0, error=""
    )
    if not claimed:
        return
    run = WhatIfRun.objects.get(pk=pk)
    try:
        scenario = export(run.start, run.end, run.groups or None)
        tasks = sum(1 for e in scenario.get("events", ()) if "submit" in e)
        WhatIfRun.objects.filter(pk=pk).update(tasks=tasks, progress=EXPORT_SHARE, updated_at=timezone.now())
        report = compare(
            scenario,
            run.changes,
            wait_threshold_s=run.wait_threshold_s,
            progress=_Progress(pk),
            processes=1,
        )
        report["no_difference"] = held.explain(scenario, run.changes, report)
    except (ExportError, WhatIfError, ScenarioError) as e:
        finish(pk, WhatIfRun.State.FAILED, error=str(e))
        return
    except Exception as e:
        log.exception("what-if run %s failed", pk)
        finish(pk, WhatIfRun.State.FAILED, error=f"internal error: {type(e).__name__}")
        return
    finish(pk, WhatIfRun.State.DONE, report=report)


class _Progress:
    """``compare``'s progress callback: the base side is the first half after the export, the
    changed side the second; written at most once a second."""

    def __init__(self, pk: int):
        self.pk = pk
        self.last = 0.0

    def __call__(self, side: str, fraction: float) -> None:
        now = time.monotonic()
        if now - self.last < PROGRESS_EVERY_S and fraction < 1.0:
            return
        self.last = now
        half = (1.0 - EXPORT_SHARE) / 2
        value = EXPORT_SHARE + half * (fraction + (1.0 if side == "changed" else 0.0))
        WhatIfRun.objects.filter(pk=self.pk, state=WhatIfRun.State.RUNNING).update(
            progress=min(value, 0.99), updated_at=timezone.now()
        )


def finish(pk: int, state: str, *, report: dict | None = None, error: str = "") -> None:
    now = timezone.now()
    done = {"progress": 1.0} if state == WhatIfRun.State.DONE else {}
    # Only a run still running: one marked failed as stale meanwhile stays failed.
    WhatIfRun.objects.filter(pk=pk, state__in=[WhatIfRun.State.QUEUED, WhatIfRun.State.RUNNING]).update(
        state=state, report=report, error=error, finished_at=now, updated_at=now, **done
    )


def fail_stale_runs() -> int:
    """Mark failed the runs whose job stopped reporting (the process running it died): running with
    no progress for ``WHATIF_STALE_S``. A queued run waits for a ``whatif`` worker however long."""
    cutoff = timezone.now() - timedelta(seconds=settings.WHATIF_STALE_S)
    return WhatIfRun.objects.filter(state=WhatIfRun.State.RUNNING, updated_at__lt=cutoff).update(
        state=WhatIfRun.State.FAILED,
        error="interrupted: the job running it stopped; run it again",
        finished_at=timezone.now(),
    )
