"""The usage ledger: one usage interval per task placement, from placement until the work has
really stopped. Every GPU-hour, budget hour and cost is derived from these intervals."""

from django.conf import settings
from django.db import models

from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS


class UsageInterval(models.Model):
    task = models.ForeignKey("tasks.Task", on_delete=models.PROTECT, related_name="intervals")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(
        "accounts.Project", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    policy = models.ForeignKey("policies.ResourcePolicy", on_delete=models.PROTECT, related_name="intervals")
    group = models.ForeignKey("accounts.Group", on_delete=models.PROTECT, related_name="+")
    compute_resource = models.ForeignKey(
        "policies.ComputeResource", on_delete=models.PROTECT, related_name="+"
    )
    pool = models.ForeignKey("pools.Pool", on_delete=models.PROTECT, related_name="intervals")
    worker = models.ForeignKey(
        "pools.Worker",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="The worker that claimed the task in this interval; empty until a worker claims it.",
    )
    gpu_type = models.ForeignKey("pools.GpuType", on_delete=models.PROTECT, related_name="+")
    gpus = models.DecimalField("GPUs", max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES)
    time_weight = models.DecimalField(max_digits=6, decimal_places=3)
    start = models.DateTimeField()
    end = models.DateTimeField(null=True, blank=True, help_text="Empty while the task holds its GPUs.")

    class Meta:
        ordering = ["-start"]
        indexes = [
            models.Index(fields=["policy", "start"], name="interval_policy_start"),
            models.Index(fields=["start"], name="interval_start"),
            models.Index(fields=["end"], name="interval_end"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(end__isnull=True) | models.Q(end__gte=models.F("start")),
                name="interval_end_after_start",
            ),
            models.UniqueConstraint(
                fields=["task"], condition=models.Q(end__isnull=True), name="one_open_interval_per_task"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task} on {self.pool} from {self.start:%Y-%m-%d %H:%M:%S}"


class BudgetAlert(models.Model):
    """A budget warning already sent: once per policy, window, period and kind."""

    class Kind(models.TextChoices):
        THRESHOLD = "threshold", "Alert threshold crossed"
        USED_UP = "used_up", "Budget used up"

    policy = models.ForeignKey(
        "policies.ResourcePolicy", on_delete=models.CASCADE, related_name="budget_alerts"
    )
    period = models.CharField(
        "budget window",
        max_length=5,
        blank=True,
        default="",
        help_text="The period of the time budget window alerted on (day, week or month).",
    )
    period_start = models.DateTimeField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    used_hours = models.DecimalField(max_digits=14, decimal_places=3)
    budget_hours = models.DecimalField(max_digits=12, decimal_places=3)
    sent_at = models.DateTimeField()

    class Meta:
        ordering = ["-sent_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["policy", "period", "period_start", "kind"], name="one_alert_per_window_period"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.policy} ({self.period_start:%Y-%m-%d})"


def _derived(to: str, **kwargs) -> models.ForeignKey:
    return models.ForeignKey(
        to, on_delete=models.DO_NOTHING, db_constraint=False, db_index=False, related_name="+", **kwargs
    )


class GroupRollup(models.Model):
    """The usage of one policy (and its group), pool and GPU type over one period, summed from the
    usage intervals by ``apps.ledger.rollups``. Derived data: rebuilt from the intervals at will.

    Amounts are exact integers: ``gpu_us`` in GPU-microseconds (milli-GPUs x milliseconds) and
    ``budget_us`` in budget-microseconds (milli time weight x milliseconds), so GPU-hours are
    ``gpu_us / 3.6e9`` and budget hours ``budget_us / 3.6e9``, with nothing lost to rounding.
    Foreign keys carry no database constraint or index of their own: the intervals already hold
    the references, and bulk rebuilds stay fast; the reports' indexes are declared below.
    """

    policy = _derived("policies.ResourcePolicy")
    group = _derived("accounts.Group")
    pool = _derived("pools.Pool")
    gpu_type = _derived("pools.GpuType")
    gpu_us = models.BigIntegerField("GPU-microseconds")
    budget_us = models.BigIntegerField("budget-microseconds")

    class Meta:
        abstract = True


class UsageRollup(GroupRollup):
    """A rollup row that also names the user and the project."""

    user = _derived(settings.AUTH_USER_MODEL)
    project = _derived("accounts.Project", null=True)

    class Meta:
        abstract = True


class HourlyRollup(UsageRollup):
    hour = models.DateTimeField(help_text="Start of the UTC hour.")

    class Meta:
        indexes = [
            models.Index(fields=["hour"], name="hourly_hour"),
            models.Index(fields=["group", "hour"], name="hourly_group_hour"),
            models.Index(fields=["user", "hour"], name="hourly_user_hour"),
        ]

    def __str__(self) -> str:
        return f"usage of {self.user_id} on {self.pool_id} in the hour from {self.hour:%Y-%m-%d %H:%M}"


class DailyRollup(UsageRollup):
    """The sum of a UTC day's hourly rows: reports read it for whole days."""

    day = models.DateField()

    class Meta:
        indexes = [
            models.Index(fields=["day"], name="daily_day"),
            models.Index(fields=["group", "day"], name="daily_group_day"),
            models.Index(fields=["user", "day"], name="daily_user_day"),
        ]

    def __str__(self) -> str:
        return f"usage of {self.user_id} on {self.pool_id} on {self.day:%Y-%m-%d}"


class DailyGroupRollup(GroupRollup):
    """A UTC day's usage without the user and the project: a few hundred rows a day however many
    users, for the estate-wide cuts by group, GPU type or pool over months and years."""

    day = models.DateField()

    class Meta:
        indexes = [models.Index(fields=["day"], name="daily_group_rollup_day")]

    def __str__(self) -> str:
        return f"usage of policy {self.policy_id} on {self.pool_id} on {self.day:%Y-%m-%d}"


class RollupState(models.Model):
    """How far the rollups are built (one row). Hours before ``built_until`` are in the rollup
    tables; reports read the intervals from there on. ``open_interval_ids`` are the intervals
    that were still running at the last refresh: one closed since (possibly back-dated, as when a
    worker is lost) makes the next refresh recompute from its end."""

    built_until = models.DateTimeField(null=True, blank=True)
    open_interval_ids = models.JSONField(default=list, blank=True)
    refreshed_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"rollups built until {self.built_until}"
