"""Writes of maintenance windows (issue 35, rule 3): schedule, change, end early. Each write locks
the pool's row, so two windows of one pool are checked for overlap one after the other, and is
audited in ``MaintenanceChange``. The engine reads the windows as estate (a change reloads it)."""

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.core.audit import record_change
from apps.core.writes import validated_save
from apps.pools.models import MaintenanceChange, MaintenanceWindow, Pool

FIELDS = ("starts_at", "ends_at", "note")


def _text(value):
    return value.isoformat() if isinstance(value, datetime) else value


def _lock(pool: Pool) -> None:
    list(Pool.objects.select_for_update(no_key=True).filter(pk=pool.pk).values_list("pk", flat=True))


def _aware(field: str, value) -> datetime:
    if not isinstance(value, datetime) or timezone.is_naive(value):
        raise ValidationError({field: "Give a date and time with its time zone."})
    return value


def schedule(
    pool: Pool, *, starts_at, ends_at, note: str = "", actor=None, via: str = "admin", now=None
) -> MaintenanceWindow:
    """A new window on ``pool``: it must end in the future and overlap no other window there."""
    now = now or timezone.now()
    starts_at, ends_at = _aware("starts_at", starts_at), _aware("ends_at", ends_at)
    if ends_at <= now:
        raise ValidationError({"ends_at": "The end must be in the future."})
    with transaction.atomic():
        _lock(pool)
        window = validated_save(
            MaintenanceWindow(pool=pool, starts_at=starts_at, ends_at=ends_at, note=note, created_by=actor)
        )
        changes = {f: [None, _text(getattr(window, f))] for f in FIELDS}
        record_change(MaintenanceChange, actor=actor, via=via, at=now, window=window, changes=changes)
    return window


def change(
    window: MaintenanceWindow, *, actor=None, via: str = "admin", now=None, **fields
) -> MaintenanceWindow:
    """Move or re-describe a window that has not ended (``fields``: starts_at, ends_at, note)."""
    now = now or timezone.now()
    unknown = set(fields) - set(FIELDS)
    if unknown:
        raise ValidationError({sorted(unknown)[0]: "Only the start, the end and the note can change."})
    with transaction.atomic():
        _lock(window.pool)
        window = MaintenanceWindow.objects.select_for_update(no_key=True).get(pk=window.pk)
        if window.called_off or window.end <= now:
            raise ValidationError({"ends_at": "This window is over; schedule a new one."})
        if "ends_at" in fields and _aware("ends_at", fields["ends_at"]) <= now:
            raise ValidationError({"ends_at": "The end must be in the future."})
        if "starts_at" in fields:
            _aware("starts_at", fields["starts_at"])
        before = {f: getattr(window, f) for f in FIELDS}
        validated_save(window, **fields)
        changes = {
            f: [_text(before[f]), _text(getattr(window, f))]
            for f in FIELDS
            if before[f] != getattr(window, f)
        }
        if changes:
            record_change(MaintenanceChange, actor=actor, via=via, at=now, window=window, changes=changes)
    return window


def end_now(window: MaintenanceWindow, *, actor=None, via: str = "admin", now=None) -> MaintenanceWindow:
    """End a window early (before its start: call it off). The pool takes work at the next pass."""
    now = now or timezone.now()
    with transaction.atomic():
        window = MaintenanceWindow.objects.select_for_update(no_key=True).get(pk=window.pk)
        if window.called_off or window.end <= now:
            raise ValidationError({"ended_at": "This window has ended already."})
        window.ended_at = now
        window.save(update_fields=["ended_at"])
        record_change(
            MaintenanceChange,
            actor=actor,
            via=via,
            at=now,
            window=window,
            changes={"ended_at": [None, _text(now)]},
        )
    return window
