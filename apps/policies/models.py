"""Profiles (GPU sizes with a time weight and a pool order), resource policies (a group's
reservation, limit and optional time budget) and compute resources (policy x profile).

The three orderings IT sets live on two link tables:

* ``ProfilePool`` joins a profile to a pool and carries both the **pool order** of the profile
  (``pool_rank``: first pool first) and the **execution priority** on the pool (``profile_rank``:
  which profile's work a pool places first).
* ``ComputeResource`` joins a policy to a profile and carries the **queuing priority** on the
  profile (``queuing_rank``: which group's work is placed first when several wait).
"""

from decimal import Decimal

from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from apps.accounts.models import Group
from apps.core.audit import AuditedChange
from apps.core.checks import Checks
from apps.core.countries import normalised, validate_country
from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS
from apps.policies.periods import Period
from apps.pools.models import Pool

IMAGE_REFERENCE = RegexValidator(
    r"^[^\s\x00-\x1f\x7f]*$", "An image reference has no spaces or control characters."
)
RESOURCE_NAME = RegexValidator(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$",
    "Enter a Kubernetes resource name, e.g. nvidia.com/mig-1g.10gb (an optional DNS prefix and /, "
    "then at most 63 letters, digits, '-', '_' or '.').",
)


def gpu_field(verbose_name: str, **kwargs) -> models.DecimalField:
    return models.DecimalField(
        verbose_name, max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES, **kwargs
    )


class Profile(models.Model):
    name = models.CharField(max_length=80, unique=True)
    gpus = gpu_field(
        "GPU size",
        default=Decimal("1"),
        help_text="Whole GPUs, or a fraction between 0 and 1 (at most 3 decimals). 0 means CPU only.",
    )
    size_from_task = models.BooleanField(
        default=False, help_text="Read each task's size from the task; the GPU size above is the default."
    )
    time_weight = models.DecimalField(
        max_digits=6,
        decimal_places=3,
        default=Decimal("1"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Budget hours one hour of a task on this profile costs, per task. 0 exempts it.",
    )
    description = models.CharField(max_length=200, blank=True)
    image = models.CharField(
        "default image",
        max_length=512,
        blank=True,
        validators=[IMAGE_REFERENCE],
        help_text="Container image for its tasks that name none in their spec (Kubernetes and Docker).",
    )
    stop_grace_s = models.PositiveIntegerField(
        "stop grace (s)",
        null=True,
        blank=True,
        help_text="Seconds a stopped task gets between SIGTERM and SIGKILL; empty: the server's default.",
    )
    memory_limit_mb = models.PositiveIntegerField(
        "memory limit (MB)",
        null=True,
        blank=True,
        help_text="Container memory cap: Docker caps fractions with it; Kubernetes sets it as the "
        "memory limit of tasks whose spec sets none.",
    )
    min_runtime_s = models.PositiveIntegerField(
        "minimum runtime (s)",
        default=0,
        help_text="Seconds a placed task of this profile is safe from reclaim (budget stops and cancels "
        "still apply). 0: no minimum.",
    )
    sovereign_country = models.CharField(
        "sovereign to",
        max_length=2,
        blank=True,
        validators=[validate_country],
        help_text="ISO 3166-1 alpha-2 code, e.g. DE: the profile lists only pools in that country. "
        "Empty: not sovereign.",
    )
    min_gpu_memory_gb = models.PositiveIntegerField(
        "minimum GPU memory (GB)",
        null=True,
        blank=True,
        help_text="The profile lists only pools whose GPU type has at least this much memory per GPU. "
        "Empty: no minimum.",
    )
    min_gpu_generation = models.PositiveSmallIntegerField(
        "minimum GPU generation",
        null=True,
        blank=True,
        help_text="The profile lists only pools whose GPU type is of this generation or newer "
        "(the GPU type's generation: 8 Ampere, 9 Hopper, 10 Blackwell). Empty: any.",
    )
    starvation_s = models.PositiveIntegerField(
        "starvation guard (s)",
        null=True,
        blank=True,
        default=600,
        help_text="A queue head that has waited this long for free GPUs holds a pool against new starts "
        "of smaller work; empty: off.",
    )
    default_priority = models.IntegerField(
        "default priority",
        default=0,
        help_text="The priority of a task sent to this profile that asks for none (a compute resource "
        "may set its own). Higher is placed first within a policy's queue.",
    )
    max_priority = models.IntegerField(
        "maximum priority",
        null=True,
        blank=True,
        help_text="The highest priority a user may ask for on this profile (a compute resource may set "
        "its own). Empty: no cap.",
    )
    default_time_limit_s = models.PositiveIntegerField(
        "default time limit (s)",
        null=True,
        blank=True,
        help_text="The time limit of a batch task sent to this profile that asks for none (a compute "
        "resource may set its own). Empty: no limit.",
    )
    max_time_limit_s = models.PositiveIntegerField(
        "maximum time limit (s)",
        null=True,
        blank=True,
        help_text="The longest time limit a task may ask for on this profile; with a maximum, every "
        "batch task has a limit (the default, else the maximum). Empty: no cap.",
    )
    unlimited_before_maintenance = models.BooleanField(
        "place work without a time limit before maintenance",
        default=False,
        help_text="Work of this profile without a time limit may be placed on a pool with a maintenance "
        "window ahead (it is preempted at the start). Off: such work waits for a pool without one.",
    )
    pools = models.ManyToManyField(Pool, through="ProfilePool", related_name="profiles")

    # Set by a form that checks every pool link of the profile itself, as submitted (the admin's
    # pool inline): the rules then skip the stored links, which that form may be removing.
    links_checked_by_form = False

    extra_checks = Checks()  # apps.policies.rules and apps.tasks.checks register here

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean_fields(self, exclude=None) -> None:
        self.sovereign_country = normalised(self.sovereign_country)
        super().clean_fields(exclude)

    def clean(self) -> None:
        self.extra_checks.run(self)

    @property
    def constraints(self) -> list[str]:
        """The short labels of what its pools must meet, e.g. ["sovereign: DE", "GPU memory ≥ 80 GB"]."""
        labels = [f"sovereign: {self.sovereign_country}"] if self.sovereign_country else []
        if self.min_gpu_memory_gb:
            labels.append(f"GPU memory ≥ {self.min_gpu_memory_gb} GB")
        if self.min_gpu_generation:
            labels.append(f"GPU generation ≥ {self.min_gpu_generation}")
        return labels


class ProfilePool(models.Model):
    """A pool of a profile, with the profile's place in the pool's execution order and the pool's in
    the profile's pool order; for a fraction on Kubernetes, the extended resource that is it."""

    profile = models.ForeignKey(Profile, on_delete=models.CASCADE, related_name="pool_links")
    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="profile_links")
    pool_rank = models.PositiveIntegerField(
        "pool order", default=0, help_text="Position of this pool in the profile's pool order."
    )
    profile_rank = models.PositiveIntegerField(
        "execution priority",
        default=0,
        help_text="Position of this profile among the pool's profiles: lower is placed first.",
    )
    gpu_resource = models.CharField(
        "GPU resource",
        max_length=253,
        blank=True,
        validators=[RESOURCE_NAME],
        help_text="Kubernetes: the extended resource a fraction of this profile is on this pool, "
        "e.g. nvidia.com/mig-1g.10gb. Whole GPUs are nvidia.com/gpu.",
    )
    gpu_resource_count = models.PositiveSmallIntegerField(
        "GPU resource count",
        default=1,
        validators=[MinValueValidator(1)],
        help_text="How many of the GPU resource one task takes per node.",
    )

    extra_checks = Checks()  # apps.policies.rules and apps.tasks.checks register here

    class Meta:
        ordering = ["profile", "pool_rank", "pk"]
        verbose_name = "pool of a profile"
        constraints = [
            models.UniqueConstraint(fields=["profile", "pool"], name="profile_pool_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.profile} on {self.pool}"

    def clean(self) -> None:
        self.extra_checks.run(self)


class ResourcePolicy(models.Model):
    Period = Period

    # What IT sets on a policy beside its group: the admin's form and manage.py bootstrap.
    SETTINGS = (
        "reservation",
        "limit",
        "budget_hours",
        "budget_period",
        "alert_threshold",
        "max_preemptions_per_hour",
        "lending",
        "over_quota_weight",
        "lendable",
        "guarantee_start_s",
        "credit_lost_work",
    )

    class Lending(models.TextChoices):
        PRIORITY = "priority", "Queuing priority (first in the queuing order borrows first)"
        FAIR = "fair", "Fair share (by over-quota weight)"

    group = models.OneToOneField(Group, on_delete=models.PROTECT, related_name="policy")
    reservation = gpu_field("reservation", default=Decimal("0"), help_text="GPUs guaranteed to the group.")
    limit = gpu_field("limit", default=Decimal("0"), help_text="The most GPUs at once, borrowed included.")
    budget_hours = models.DecimalField(
        "time budget (budget hours)",
        max_digits=12,
        decimal_places=3,
        null=True,
        blank=True,
        help_text="Budget hours per period; leave empty for no time budget.",
    )
    budget_period = models.CharField(
        "budget period", max_length=5, choices=Period.choices, blank=True, default=""
    )
    alert_threshold = models.PositiveSmallIntegerField(
        "alert threshold (%)",
        default=80,
        validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Warn admins and the group once per period when this share of the budget is used.",
    )
    max_preemptions_per_hour = models.PositiveIntegerField(
        "most reclaims per hour",
        null=True,
        blank=True,
        help_text="Reclaim takes at most this many of the group's own tasks in any sliding hour; "
        "past it, the group's work is not a victim. Empty: no cap.",
    )
    lending = models.CharField(
        "lending among children",
        max_length=8,
        choices=Lending.choices,
        default=Lending.PRIORITY,
        help_text="How the group's child groups share the GPUs they borrow above their reservations: "
        "priority (the first in the queuing order borrows first) or fair (in proportion to each "
        "child's over-quota weight, reclaiming from a child above its fair share).",
    )
    over_quota_weight = models.DecimalField(
        "over-quota weight",
        max_digits=8,
        decimal_places=3,
        default=Decimal("1"),
        validators=[MinValueValidator(Decimal("0"))],
        help_text="The group's share of borrowed GPUs beside its siblings when its parent lends fairly: "
        "a child of weight 2 gets twice the borrowed GPUs of a child of weight 1. 0: borrows only "
        "what no sibling wants.",
    )
    lendable = gpu_field(
        "lendable",
        null=True,
        blank=True,
        help_text="The most of the group's idle reservation lent to other groups; the rest stays idle "
        "for the group's own arrivals. Empty: all of the reservation may be lent.",
    )
    guarantee_start_s = models.PositiveIntegerField(
        "guaranteed start (s)",
        default=120,
        help_text="Work placed within the reservation counts as started on time when it started "
        "within this many seconds of entering its queue (the measured guarantee).",
    )
    credit_lost_work = models.BooleanField(
        "credit lost work",
        default=False,
        help_text="Chargeback credits back the GPU-hours its preempted work lost (since the last "
        "checkpoint), at the GPU type's price: a 'credit for lost work' line on the group's statement.",
    )
    version = models.PositiveIntegerField(
        default=1,
        editable=False,
        help_text="Counts the saves of this policy; a form that carries an older version is refused.",
    )

    extra_checks = Checks()  # apps.policies.rules and apps.tasks.checks register here

    class Meta:
        ordering = ["group__name"]
        verbose_name = "resource policy"
        verbose_name_plural = "resource policies"

    def __str__(self) -> str:
        return f"{self.group} policy"

    @property
    def has_budget(self) -> bool:
        return self.budget_hours is not None

    def clean(self) -> None:
        self.extra_checks.run(self)


class ComputeResource(models.Model):
    """What users and agents send work to: one group's policy joined to one profile."""

    name = models.CharField(max_length=120, unique=True)
    policy = models.ForeignKey(ResourcePolicy, on_delete=models.PROTECT, related_name="compute_resources")
    profile = models.ForeignKey(Profile, on_delete=models.PROTECT, related_name="compute_resources")
    queuing_rank = models.PositiveIntegerField(
        "queuing priority",
        default=0,
        help_text="Position of this policy among the profile's policies: lower is placed first.",
    )
    enabled = models.BooleanField(default=True, help_text="A disabled compute resource accepts no new tasks.")
    default_priority = models.IntegerField(
        "default priority",
        null=True,
        blank=True,
        help_text="The priority of a task sent here that asks for none. Empty: the profile's.",
    )
    max_priority = models.IntegerField(
        "maximum priority",
        null=True,
        blank=True,
        help_text="The highest priority a user may ask for here. Empty: the profile's.",
    )
    default_time_limit_s = models.PositiveIntegerField(
        "default time limit (s)",
        null=True,
        blank=True,
        help_text="The time limit of a batch task sent here that asks for none. Empty: the profile's.",
    )
    max_time_limit_s = models.PositiveIntegerField(
        "maximum time limit (s)",
        null=True,
        blank=True,
        help_text="The longest time limit a task may ask for here. Empty: the profile's.",
    )

    extra_checks = Checks()  # apps.policies.rules and apps.tasks.checks register here

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "profile"], name="compute_resource_policy_profile"),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        self.extra_checks.run(self)


class PriorityClass(models.Model):
    """A named task priority IT offers (e.g. low 0, normal 100, high 200): a submit may ask for
    the name instead of the number. Higher is placed first within one policy's queue."""

    name = models.SlugField(max_length=40, unique=True, help_text="What users ask for, e.g. high.")
    value = models.IntegerField(unique=True, help_text="The priority it stands for; higher is placed first.")
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["-value"]
        verbose_name = "priority class"
        verbose_name_plural = "priority classes"

    def __str__(self) -> str:
        return f"{self.name} ({self.value})"


class PolicyChange(AuditedChange):
    """The audit trail of quota changes: who changed a policy's reservation, limit or time budget,
    when, through which channel, and each field's value before and after."""

    class Via(models.TextChoices):
        PORTAL = "portal", "Portal quota split"
        ADMIN = "admin", "Admin"
        LOAN = "loan", "Dated quota loan"

    policy = models.ForeignKey(ResourcePolicy, on_delete=models.CASCADE, related_name="changes")
    via = models.CharField(max_length=10, choices=Via.choices, default=Via.PORTAL)
    changes = models.JSONField(help_text="{field: [before, after]} of each field that changed.")

    class Meta(AuditedChange.Meta):
        verbose_name = "quota change"

    def __str__(self) -> str:
        return f"{self.policy} changed at {self.at:%Y-%m-%d %H:%M:%S}"


from apps.policies.models_budgets import BudgetWindow  # noqa: E402, F401  (its own module: one concern)
from apps.policies.models_loans import QuotaLoan  # noqa: E402, F401  (its own module: one concern)
