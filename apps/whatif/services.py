"""Writes of what-if runs (docs/whatif.md, "Runs"): check and save a run, hand it to a background
job (``runs`` runs it: export the period, replay both sides, store the comparison).

A run is checked in full when it is asked for, so a bad change is refused at once with the field
and the reason: the period and scope by the export's own rules, the changes by applying them to the
estate as it stood at the period's start (an export of the period's first second, cheap)."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.engine.core.scenario_model import ScenarioError
from apps.engine.core.whatif_changes import CHANGE_KINDS, WhatIfError, apply_changes
from apps.engine.export import ExportError, export
from apps.whatif import runs
from apps.whatif.models import WhatIfRun
from apps.whatif.tasks import run_whatif

log = logging.getLogger(__name__)
WAIT_THRESHOLD_MAX_S = 2**31 - 1


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
        threading.Thread(target=runs.run_in_thread, args=(pk,), name=f"whatif-{pk}", daemon=True).start()
        return
    try:
        run_whatif.apply_async(args=[pk])
    except Exception:
        log.exception("what-if run %s not queued", pk)
        runs.finish(pk, WhatIfRun.State.FAILED, error="could not be queued: the task broker is unreachable")
