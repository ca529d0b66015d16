"""Writes of what-if runs (docs/whatif.md, "Runs"): check and save a run, hand it to a background
job, and run it (export the period, replay both sides, store the comparison).

A run is checked in full when it is asked for, so a bad change is refused at once with the field
and the reason: the period and scope by the export's own rules, the changes by applying them to the
estate as it stood at the period's start (an export of the period's first second, cheap)."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from apps.engine.core.scenario import ScenarioError
from apps.engine.core.whatif import CHANGE_KINDS, WhatIfError, apply_changes, compare
from apps.engine.export import ExportError, export
from apps.whatif.models import WhatIfRun

log = logging.getLogger(__name__)
EXPORT_SHARE = 0.05
WAIT_THRESHOLD_MAX_S = 2**31 - 1
PROGRESS_EVERY_S = 1.0


class RunError(ValueError):
    """Bad input for a run: ``field`` names it (``start``, ``end``, ``groups``, ``changes``,
    ``wait_threshold_s``) and the message says why."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


@dataclass(frozen=True)
class RunRequest:
    start: datetime
    end: datetime
    groups: list[str]
    changes: dict
    wait_threshold_s: int = 3600
    title: str = ""


def check(request: RunRequest) -> None:
    """Raise ``RunError`` naming the first bad field of ``request``."""
    start, end = request.start, request.end
    for field, value in (("start", start), ("end", end)):
        if value.tzinfo is None:
            raise RunError(field, "needs a UTC offset")
    if end <= start:
        raise RunError("end", "must be later than start")
    if end > timezone.now():
        raise RunError("end", "must not be in the future: only recorded demand can be replayed")
    longest = timedelta(days=settings.WHATIF_MAX_DAYS)
    if end - start > longest:
        raise RunError("end", f"the period may span at most {settings.WHATIF_MAX_DAYS} days")
    groups = request.groups
    if not isinstance(groups, list | tuple) or not all(isinstance(g, str) and g for g in groups):
        raise RunError("groups", "must be a list of group slugs")
    threshold = request.wait_threshold_s
    whole = isinstance(threshold, int) and not isinstance(threshold, bool)
    if not whole or not 0 <= threshold <= WAIT_THRESHOLD_MAX_S:
        raise RunError("wait_threshold_s", f"must be a whole number, 0 or more, up to {WAIT_THRESHOLD_MAX_S}")
    if not isinstance(request.changes, dict):
        raise RunError("changes", "must be an object of change kinds")
    unknown = sorted(set(request.changes) - set(CHANGE_KINDS))
    if unknown:
        raise RunError("changes", f"unknown kind {unknown[0]!r}; kinds are {', '.join(CHANGE_KINDS)}")
    try:
        estate = export(start, min(end, start + timedelta(seconds=1)), request.groups or None)
    except ExportError as e:
        raise _export_error(e) from None
    try:
        apply_changes(estate, request.changes)
    except (WhatIfError, ScenarioError, ArithmeticError) as e:
        raise RunError("changes", str(e).removeprefix("changes.").removeprefix("changes: ")) from None


def _export_error(e: ExportError) -> RunError:
    text = str(e)
    for field in ("groups", "start", "end"):
        if text.startswith(f"--{field}"):
            return RunError(field, text.split(":", 1)[1].strip())
    return RunError("start", text)


def start_run(user, request: RunRequest) -> WhatIfRun:
    """Check ``request``, save it as a queued run of ``user`` and start its job after commit."""
    check(request)
    run = WhatIfRun.objects.create(
        title=request.title.strip()[:200],
        created_by=user,
        start=request.start,
        end=request.end,
        groups=list(request.groups),
        changes=request.changes,
        wait_threshold_s=request.wait_threshold_s,
    )
    transaction.on_commit(lambda: dispatch(run.pk))
    return run


def dispatch(pk: int) -> None:
    """Hand the run to Celery (queue ``whatif``); with ``WHATIF_INLINE`` (no broker: the embedded
    default) run it in a thread of this process, so the page that asked for it answers at once."""
    if settings.WHATIF_INLINE:
        threading.Thread(target=_run_in_thread, args=(pk,), name=f"whatif-{pk}", daemon=True).start()
        return
    from apps.whatif.tasks import run_whatif

    try:
        run_whatif.apply_async(args=[pk])
    except Exception:
        log.exception("what-if run %s not queued", pk)
        _finish(pk, WhatIfRun.State.FAILED, error="could not be queued: the task broker is unreachable")


def _run_in_thread(pk: int) -> None:
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
    except (ExportError, WhatIfError, ScenarioError) as e:
        _finish(pk, WhatIfRun.State.FAILED, error=str(e))
        return
    except Exception as e:
        log.exception("what-if run %s failed", pk)
        _finish(pk, WhatIfRun.State.FAILED, error=f"internal error: {type(e).__name__}")
        return
    _finish(pk, WhatIfRun.State.DONE, report=report)


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


def _finish(pk: int, state: str, *, report: dict | None = None, error: str = "") -> None:
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
