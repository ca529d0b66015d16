"""Saved what-if runs (docs/whatif.md): a recorded period replayed as recorded and under IT's
changes, with who ran it, the changes and the comparison report."""

from django.conf import settings
from django.db import models


class WhatIfRun(models.Model):
    class State(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"

    title = models.CharField(max_length=200, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    start = models.DateTimeField(help_text="Start of the recorded period (inclusive).")
    end = models.DateTimeField(help_text="End of the recorded period (exclusive).")
    groups = models.JSONField(default=list, blank=True, help_text="Group slugs of the scope; empty: all.")
    changes = models.JSONField(default=dict, blank=True, help_text="IT's changes (docs/whatif.md).")
    wait_threshold_s = models.PositiveIntegerField(default=3600)
    state = models.CharField(max_length=10, choices=State.choices, default=State.QUEUED, db_index=True)
    progress = models.FloatField(default=0.0, help_text="0..1 of both replays together.")
    tasks = models.PositiveIntegerField(null=True, blank=True, help_text="Tasks in the exported period.")
    error = models.TextField(blank=True)
    report = models.JSONField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = "what-if run"

    def __str__(self) -> str:
        return self.title or f"What-if {self.pk}: {self.start:%Y-%m-%d} to {self.end:%Y-%m-%d}"

    @property
    def finished(self) -> bool:
        return self.state in (self.State.DONE, self.State.FAILED)


class AdvisorProposal(models.Model):
    """A quota advisor's proposal for a recorded period (docs/whatif.md, "Quota advisor"): per
    group the figures measured, the reservation, limit and budget proposed, and the what-if run
    that replays the period under them; the groups accepted as change requests."""

    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    start = models.DateTimeField(help_text="Start of the recorded period (inclusive).")
    end = models.DateTimeField(help_text="End of the recorded period (exclusive).")
    goals = models.JSONField(default=dict, help_text="The goals the proposal aimed at.")
    groups = models.JSONField(default=list, help_text="Per group: current, measured and proposed figures.")
    run = models.ForeignKey(WhatIfRun, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    accepted = models.JSONField(default=dict, blank=True, help_text="Group slug -> change request id.")

    class Meta:
        ordering = ["-start", "-pk"]
        verbose_name = "quota advisor proposal"

    def __str__(self) -> str:
        return f"Quota advisor {self.start:%Y-%m-%d} to {self.end:%Y-%m-%d}"
