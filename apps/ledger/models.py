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
    """A budget warning already sent: once per policy, period and kind."""

    class Kind(models.TextChoices):
        THRESHOLD = "threshold", "Alert threshold crossed"
        USED_UP = "used_up", "Budget used up"

    policy = models.ForeignKey(
        "policies.ResourcePolicy", on_delete=models.CASCADE, related_name="budget_alerts"
    )
    period_start = models.DateTimeField()
    kind = models.CharField(max_length=10, choices=Kind.choices)
    used_hours = models.DecimalField(max_digits=14, decimal_places=3)
    budget_hours = models.DecimalField(max_digits=12, decimal_places=3)
    sent_at = models.DateTimeField()

    class Meta:
        ordering = ["-sent_at"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "period_start", "kind"], name="one_alert_per_period"),
        ]

    def __str__(self) -> str:
        return f"{self.get_kind_display()}: {self.policy} ({self.period_start:%Y-%m-%d})"
