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
    agent = models.ForeignKey(
        "accounts.Agent",
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="The agent whose work this is, for its owner (the user); empty: the user's own.",
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
            # Budgets read a policy's intervals still running or ended in the current period.
            models.Index(fields=["policy", "end"], name="interval_policy_end"),
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
    """A budget warning already sent: once per policy, window (a time window by its period, a money
    window by its period and currency), period and kind."""

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
    currency = models.CharField(
        max_length=3, blank=True, default="", help_text="A money window's currency; empty for a time window."
    )
    period_start = models.DateTimeField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    used_hours = models.DecimalField(max_digits=14, decimal_places=3, null=True, blank=True)
    budget_hours = models.DecimalField(max_digits=12, decimal_places=3, null=True, blank=True)
    spent = models.DecimalField(
        max_digits=16, decimal_places=4, null=True, blank=True, help_text="A money window's spend."
    )
    amount = models.DecimalField(
        max_digits=12, decimal_places=4, null=True, blank=True, help_text="A money window's amount."
    )
    sent_at = models.DateTimeField()

    class Meta:
        ordering = ["-sent_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["policy", "period", "currency", "period_start", "kind"],
                name="one_alert_per_window_period",
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
    agent = _derived("accounts.Agent", null=True)

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


class MonthClose(models.Model):
    """A closed UTC month: its chargeback figures are frozen in ``FrozenUsage`` rows (per
    currency, with the price list in force at the close in ``prices``) and reports read them, not
    the ledger. A month has at most one close in force; reopening keeps the row, marked reopened,
    and every close and reopening leaves a ``MonthCloseEvent``."""

    month = models.DateField(help_text="The first day of the UTC month.")
    closed_at = models.DateTimeField()
    closed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    prices = models.JSONField(
        default=dict,
        help_text="The price list used, per currency: [{gpu_type, start, end, per_gpu_hour}, ...].",
    )
    reopened_at = models.DateTimeField(null=True, blank=True)
    reopened_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reopen_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["-month", "-closed_at"]
        constraints = [
            models.UniqueConstraint(
                fields=["month"],
                condition=models.Q(reopened_at__isnull=True),
                name="one_close_in_force_per_month",
            ),
        ]

    def __str__(self) -> str:
        state = "reopened" if self.reopened_at else "closed"
        return f"{self.month:%B %Y} ({state})"


class FrozenUsage(models.Model):
    """One frozen figure of a closed month: the usage of a group, user, project and pool on one GPU
    type in one price segment, with its price and cost in one currency. ``cost`` is exactly
    ``gpu_us / 3.6e9 x per_gpu_hour`` before rounding; empty ``per_gpu_hour``: no price then."""

    close = models.ForeignKey(MonthClose, on_delete=models.CASCADE, related_name="frozen")
    currency = models.CharField(max_length=3)
    group = _derived("accounts.Group")
    user = _derived(settings.AUTH_USER_MODEL)
    project = _derived("accounts.Project", null=True)
    agent = _derived("accounts.Agent", null=True)
    pool = _derived("pools.Pool")
    gpu_type = _derived("pools.GpuType")
    segment_start = models.DateTimeField(help_text="When the price of this row took effect in the month.")
    per_gpu_hour = models.DecimalField(max_digits=12, decimal_places=4, null=True, blank=True)
    gpu_us = models.BigIntegerField("GPU-microseconds")
    budget_us = models.BigIntegerField("budget-microseconds")
    cost = models.DecimalField(max_digits=18, decimal_places=2)

    class Meta:
        indexes = [models.Index(fields=["close", "currency"], name="frozen_close_currency")]
        verbose_name_plural = "frozen usage"

    def __str__(self) -> str:
        return f"frozen usage of group {self.group_id} on GPU type {self.gpu_type_id}"


class Adjustment(models.Model):
    """A change to a closed month's figures, booked in the next open month: a back-dated price
    change or a late usage correction. Deltas per group, project and GPU type, in one currency;
    ``cost_units`` is the exact cost delta x 3.6e13 (``cost`` the same rounded to cents).
    ``source``: a re-pricing of the month's usage (the late-corrections sweep books and nets those)
    or a cloud bill's difference booked by finance (apps/cloud/bill_reconcile.py), which the sweep
    leaves alone."""

    class Source(models.TextChoices):
        REPRICING = "repricing", "Prices or usage changed"
        CLOUD_BILL = "cloud_bill", "Cloud bill reconciled"

    closed_month = models.DateField(help_text="The closed month whose figures changed.")
    booked_in = models.DateField(help_text="The open month the adjustment is booked in (its first day).")
    currency = models.CharField(max_length=3)
    group = models.ForeignKey("accounts.Group", on_delete=models.PROTECT, related_name="+")
    project = models.ForeignKey(
        "accounts.Project", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    gpu_type = models.ForeignKey("pools.GpuType", on_delete=models.PROTECT, related_name="+")
    gpu_us = models.BigIntegerField("GPU-microseconds")
    budget_us = models.BigIntegerField("budget-microseconds")
    cost_units = models.DecimalField(max_digits=40, decimal_places=0)
    cost = models.DecimalField(max_digits=18, decimal_places=2)
    reason = models.TextField()
    source = models.CharField(max_length=12, choices=Source.choices, default=Source.REPRICING)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    at = models.DateTimeField()
    voided_at = models.DateTimeField(
        null=True, blank=True, help_text="Set when the closed month was reopened: it is priced on read again."
    )

    class Meta:
        ordering = ["booked_in", "at", "pk"]
        indexes = [models.Index(fields=["booked_in"], name="adjustment_booked_in")]

    def __str__(self) -> str:
        return f"adjustment of {self.closed_month:%B %Y} booked in {self.booked_in:%B %Y}: {self.reason}"


class MonthCloseEvent(models.Model):
    """The audit trail of closing and reopening months: who, when, why."""

    class Action(models.TextChoices):
        CLOSED = "closed", "Closed"
        REOPENED = "reopened", "Reopened"

    close = models.ForeignKey(MonthClose, on_delete=models.CASCADE, related_name="events")
    action = models.CharField(max_length=10, choices=Action.choices)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True)
    at = models.DateTimeField()

    class Meta:
        ordering = ["-at", "-pk"]

    def __str__(self) -> str:
        return f"{self.get_action_display()} {self.close.month:%B %Y} at {self.at:%Y-%m-%d %H:%M}"
