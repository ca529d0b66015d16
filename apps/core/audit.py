"""The one pattern of the audit trails (price, node price, cloud spend cap and quota changes):
``AuditedChange``, the fields every recorded change has, and ``record_change``, the one way the
services write a row of a trail."""

from datetime import datetime
from typing import TypeVar

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditedChange(models.Model):
    """One recorded change: who made it (``actor``; empty for the system, or once the user is
    deleted), when (``at``) and through which channel (``via``: each trail narrows it to its own
    ``Via`` choices). What changed is each trail's own: its subject, and the values before and after.
    Newest first."""

    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    via = models.CharField(max_length=10)
    at = models.DateTimeField(db_index=True)

    class Meta:
        abstract = True
        ordering = ["-at", "-pk"]


Change = TypeVar("Change", bound=AuditedChange)


def record_change(trail: type[Change], *, actor, via: str, at: datetime | None = None, **what) -> Change:
    """Write one row of ``trail`` in the caller's transaction: made by ``actor`` through ``via``,
    at ``at`` (now when not given); ``what``: the trail's own fields, what changed."""
    return trail.objects.create(actor=actor, via=via, at=at or timezone.now(), **what)
