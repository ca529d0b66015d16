"""The engine's own records: the switch IT flips, the windows it was off (not charged to time
budgets), one record per pass for the dashboards, and the running totals of passes that
Prometheus reads as counters."""

from django.conf import settings
from django.db import models


class EngineSwitch(models.Model):
    """A single row: whether the compute policy engine runs its passes."""

    enabled = models.BooleanField(default=True)
    changed_at = models.DateTimeField(null=True, blank=True)
    changed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        verbose_name = "engine switch"
        verbose_name_plural = "engine switches"

    def __str__(self) -> str:
        return "engine enabled" if self.enabled else "engine disabled"


class DisabledWindow(models.Model):
    """A time the engine was disabled. Time budgets are not charged inside it."""

    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True, help_text="Empty while the engine is still disabled.")
    disabled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-start"]
        constraints = [
            models.UniqueConstraint(
                fields=["end"], condition=models.Q(end__isnull=True), name="one_open_window"
            ),
        ]

    def __str__(self) -> str:
        return f"disabled {self.start:%Y-%m-%d %H:%M:%S} to {self.end or 'now'}"

    @classmethod
    def spans(cls, since, now):
        """(start, end) of each window overlapping [since, now), end None while the engine is still
        disabled: the spans time budgets leave uncharged (``apps.ledger.budgets.UNCHARGED``)."""
        return (
            cls.objects.filter(start__lt=now)
            .filter(models.Q(end__isnull=True) | models.Q(end__gt=since))
            .values_list("start", "end")
        )


class PassRecord(models.Model):
    """One pass of the engine, or one skipped because another process held the lock.

    A pass that ran began (``started_at``) once it held the pass lock, and ran for
    ``duration_ms`` before its transaction committed, all while holding it: two passes' spans
    never overlap. ``runner`` names the process (``host:pid``), so an operator running several
    engines sees which one is active."""

    started_at = models.DateTimeField(db_index=True)
    runner = models.CharField(max_length=80, blank=True)
    skipped = models.BooleanField(default=False)
    skip_reason = models.CharField(max_length=40, blank=True)
    duration_ms = models.FloatField(default=0)
    load_ms = models.FloatField(default=0)
    decide_ms = models.FloatField(default=0)
    apply_ms = models.FloatField(default=0)
    placed = models.PositiveIntegerField(default=0)
    preempted = models.PositiveIntegerField(default=0)
    waiting = models.PositiveIntegerField(default=0)
    running = models.PositiveIntegerField(default=0)
    queries = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-started_at"]
        verbose_name = "engine pass"
        verbose_name_plural = "engine passes"

    def __str__(self) -> str:
        return f"pass at {self.started_at:%Y-%m-%d %H:%M:%S}"


# Upper bounds (ms) of the buckets of the pass duration histogram; each has a field on PassTotals.
PASS_BUCKETS_MS = (5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000)


class PassTotals(models.Model):
    """Running totals of the passes since the installation began, for Prometheus's counters and
    histogram. The pass log is pruned after ``PASS_LOG_DAYS``; these rows never are, and they
    only grow: each is updated (``F()`` expressions) in the same transaction as the pass's record.

    One row per outcome: ``ran``, or ``skipped: <reason>``. ``le_<ms>`` counts the passes that
    took at most that many milliseconds (cumulative, as Prometheus's buckets are)."""

    RAN = "ran"

    name = models.CharField(max_length=60, unique=True)
    count = models.PositiveBigIntegerField(default=0)
    duration_ms = models.FloatField(default=0)
    le_5 = models.PositiveBigIntegerField(default=0)
    le_10 = models.PositiveBigIntegerField(default=0)
    le_25 = models.PositiveBigIntegerField(default=0)
    le_50 = models.PositiveBigIntegerField(default=0)
    le_100 = models.PositiveBigIntegerField(default=0)
    le_250 = models.PositiveBigIntegerField(default=0)
    le_500 = models.PositiveBigIntegerField(default=0)
    le_1000 = models.PositiveBigIntegerField(default=0)
    le_2500 = models.PositiveBigIntegerField(default=0)
    le_5000 = models.PositiveBigIntegerField(default=0)

    class Meta:
        verbose_name = "engine pass totals"
        verbose_name_plural = "engine pass totals"

    def __str__(self) -> str:
        return f"{self.name}: {self.count}"

    @staticmethod
    def skipped_name(reason: str) -> str:
        return f"skipped: {reason}"


class Change(models.Model):
    """One write the live engine has not read yet, written by database triggers in the writer's
    own transaction (``apps.engine.changes``): a task that changed (``task_id``), or, with no task,
    a change to the estate (pools, profiles, policies, groups, projects) or a deleted task, after
    which the engine reloads everything. ``mark``: on PostgreSQL the writing transaction's id;
    on SQLite 0, where the row's id is in commit order. The engine deletes what it has read."""

    mark = models.BigIntegerField(db_index=True)
    task_id = models.BigIntegerField(null=True)

    class Meta:
        verbose_name = "engine change"

    def __str__(self) -> str:
        return f"task {self.task_id} changed" if self.task_id else "the estate changed"


class ChangeEpoch(models.Model):
    """A single row naming the change log's lifetime: when it is gone or differs (a flushed or
    restored database), the engine's held snapshot is dropped and reloaded whole."""

    token = models.UUIDField()
    pruned_upto = models.BigIntegerField(default=0, help_text="Changes below this were deleted.")

    def __str__(self) -> str:
        return f"change log {self.token}"
