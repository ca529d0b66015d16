"""The hardware: GPU types, pools with a declared capacity, and the worker daemons that serve them."""

from datetime import UTC, datetime
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models, transaction
from django.utils import timezone

from apps.core.audit import AuditedChange
from apps.core.checks import Checks
from apps.core.countries import normalised, validate_country
from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS, gpu_amount_error


class GpuType(models.Model):
    name = models.CharField(max_length=60, unique=True, help_text="For example A100-80GB, H100, L40S.")
    memory_gb = models.PositiveIntegerField(default=0, help_text="GPU memory in GB; 0 for CPU only.")
    generation = models.PositiveSmallIntegerField(
        default=0,
        help_text="Architecture generation: the CUDA compute capability's major number (7 Volta and "
        "Turing, 8 Ampere and Ada, 9 Hopper, 10 Blackwell); 0 for CPU only or unknown.",
    )

    # a profile's minimum memory and generation (apps.policies): apps.core.checks
    extra_checks = Checks()

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU type"

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        self.extra_checks.run(self)


DNS_LABEL = RegexValidator(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    "Enter a Kubernetes namespace: at most 63 lowercase letters, digits and '-', "
    "starting and ending with a letter or digit.",
)


class Pool(models.Model):
    class Kind(models.TextChoices):
        KUBERNETES = "kubernetes", "On-prem Kubernetes"
        BAREMETAL = "baremetal", "Bare metal and VMs"
        HPC = "hpc", "HPC cluster"
        CLOUD = "cloud", "Cloud and neocloud"

    MULTI_NODE_KINDS = (Kind.KUBERNETES, Kind.HPC)

    name = models.CharField(max_length=80, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    gpu_type = models.ForeignKey(GpuType, on_delete=models.PROTECT, related_name="pools")
    capacity = models.DecimalField(
        "declared capacity",
        max_digits=GPU_MAX_DIGITS,
        decimal_places=GPU_DECIMAL_PLACES,
        validators=[MinValueValidator(Decimal("0"))],
        help_text='GPUs. "Full" means this much is in use, so keep it equal to the hardware.',
    )
    region = models.CharField(
        max_length=40, blank=True, help_text="Region or sovereignty tag, for example eu-de or in-country."
    )
    country = models.CharField(
        max_length=2,
        blank=True,
        validators=[validate_country],
        help_text="ISO 3166-1 alpha-2 code of the country its hardware is in, e.g. DE; empty: none. "
        "Sovereign profiles list only pools of their country.",
    )
    enabled = models.BooleanField(default=True, help_text="A disabled pool receives no new work.")
    claim_timeout_s = models.PositiveIntegerField(
        "claim timeout (s)",
        null=True,
        blank=True,
        help_text="How long a placement waits for a worker to claim it before it goes back to its queue. "
        "Empty: the WORKER_CLAIM_TIMEOUT_S setting. A cloud pool's is set from its boot timeout, so "
        "work placed there waits for the node the autoscaler launches for it.",
    )
    multi_node = models.BooleanField(
        "multi-node",
        default=None,
        help_text="Its workers run tasks on several nodes at once. Left unset, it follows the kind: "
        "yes for Kubernetes and HPC pools, no for the others.",
    )
    namespace = models.CharField(
        max_length=63,
        blank=True,
        validators=[DNS_LABEL],
        help_text="Kubernetes pools: the namespace its workers create pods in.",
    )
    namespace_per_group = models.BooleanField(
        "namespace per group",
        default=False,
        help_text="Kubernetes pools: each group's pods go to <namespace>-<group>.",
    )

    # Set by a form that checks every profile link of the pool itself, as submitted (the admin's
    # execution order inline): the rules then skip the stored links, which that form may be removing.
    links_checked_by_form = False
    # the profiles that list the pool (apps.policies) and multi-node work (apps.tasks): apps.core.checks
    extra_checks = Checks()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs) -> None:
        """Also records a change of declared capacity or of ``enabled`` in the pool's capacity
        history, whoever saves it; ``capacity_note`` (set by services and the admin) says who, why
        and since when."""
        self._default_multi_node()
        with transaction.atomic():
            super().save(*args, **kwargs)
            fields = kwargs.get("update_fields")
            if fields is None or {"capacity", "enabled"} & set(fields):
                PoolCapacityChange.record(self, **(getattr(self, "capacity_note", None) or {}))
                self.capacity_note = None

    def _default_multi_node(self) -> None:
        """Left unset (None), ``multi_node`` follows the kind."""
        if self.multi_node is None:
            self.multi_node = self.kind in self.MULTI_NODE_KINDS

    def clean_fields(self, exclude=None) -> None:
        self._default_multi_node()
        self.country = normalised(self.country)
        super().clean_fields(exclude)

    def clean(self) -> None:
        error = self.capacity is not None and gpu_amount_error(self.capacity)
        if error:
            raise ValidationError({"capacity": f"Declared capacity: {error}"})
        self.extra_checks.run(self)


# The "in force from" of a capacity known to hold since before anything was recorded: the first row
# of the pools that existed when the history began (migration 0007), and of the demo's pools.
SINCE_EVER = datetime(1970, 1, 1, tzinfo=UTC)


class PoolCapacityChange(models.Model):
    """The pool's declared capacity, whether it was enabled and the GPUs its live worker daemons
    had (``observed``), in force from ``at`` until its next row: the pool's effective-dated capacity
    history. Every save of a pool that changes either of the first two adds a row (``Pool.save``,
    and the cloud autoscaler's own write), and so does a change of the daemons' GPUs (enrolment,
    retirement, a daemon lost or back, a heartbeat reporting other GPUs); the first row is the pool's
    creation. Before it the pool did not exist (capacity 0). ``apps.pools.selectors.capacity_segments``
    reads it."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="capacity_history")
    at = models.DateTimeField("in force from")
    capacity = models.DecimalField(
        "declared capacity", max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES
    )
    enabled = models.BooleanField()
    observed = models.DecimalField(
        "observed capacity",
        max_digits=GPU_MAX_DIGITS,
        decimal_places=GPU_DECIMAL_PLACES,
        null=True,
        blank=True,
        help_text="The GPUs the pool's live worker daemons reported having; empty while no daemon "
        "ever served it (its declared capacity holds).",
    )
    by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["pool__name", "at", "pk"]
        indexes = [models.Index(fields=["pool", "at"], name="pool_capacity_at")]
        verbose_name = "pool capacity change"

    def __str__(self) -> str:
        state = "" if self.enabled else ", disabled"
        seen = "" if self.observed is None else f" ({self.observed} live)"
        return f"{self.pool}: {self.capacity} GPUs{seen}{state} from {self.at:%Y-%m-%d %H:%M}"

    @classmethod
    def record(cls, pool: Pool, *, at: datetime | None = None, by=None, reason: str = "") -> bool:
        """Add a row when the pool's declared capacity or ``enabled`` differs from the row in force
        last; return whether it did. An invariant of every pool write (``Pool.save``), so it lives
        with the model; ``apps.pools.services.record_capacity`` is the services' name for it."""
        last = cls.objects.filter(pool=pool).order_by("-at", "-pk").first()
        capacity = Decimal(pool.capacity)
        if last is not None and last.capacity == capacity and last.enabled == pool.enabled:
            return False
        if not reason:
            reason = "created" if last is None else ""
        cls.objects.create(
            pool=pool,
            at=at or timezone.now(),
            capacity=capacity,
            enabled=pool.enabled,
            observed=last.observed if last is not None else None,
            by=by,
            reason=reason[:200],
        )
        return True


class EnrolmentToken(models.Model):
    """A secret IT hands to the worker daemons of one pool; a daemon exchanges it for its own
    worker token at enrolment. Only a SHA-256 is stored: the token is shown once, at creation."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="enrolment_tokens")
    name = models.CharField(max_length=100, help_text="What it is for, e.g. rack 12 or the login nodes.")
    prefix = models.CharField(max_length=16, editable=False)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires.")
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    single_use = models.BooleanField(
        "single use", default=False, help_text="One enrolment only, e.g. the token of one cloud node."
    )
    used_at = models.DateTimeField("used", null=True, blank=True, editable=False)

    class Meta:
        ordering = ["pool__name", "-created_at"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…) for {self.pool}"

    def is_usable(self, now) -> bool:
        """Neither revoked nor expired. A used single-use token stays usable until it is revoked, but
        only by the host that used it (``services.enrol_adopting`` checks the hostname): a cloud
        node's restarted daemon enrols again with it."""
        if self.revoked_at is not None:
            return False
        if self.single_use and self.used_at is not None:
            return True
        return self.expires_at is None or self.expires_at > now


class Worker(models.Model):
    """A Klique worker daemon in a pool; it pulls work over outbound HTTPS."""

    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        LOST = "lost", "Lost"
        RETIRED = "retired", "Retired"

    class Mode(models.TextChoices):
        PROCESS = "process", "Process (subprocesses on the host)"
        SLURM = "slurm", "Slurm (sbatch on an HPC cluster)"
        KUBERNETES = "kubernetes", "Kubernetes (pods in a cluster)"
        DOCKER = "docker", "Docker (containers on the host)"

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="workers")
    hostname = models.CharField(max_length=255)
    mode = models.CharField(max_length=10, choices=Mode.choices, default=Mode.PROCESS)
    version = models.CharField(max_length=40, blank=True)
    gpus = models.DecimalField(
        max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES, default=Decimal("0")
    )
    free_gpus = models.DecimalField(
        "free GPUs", max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES, null=True, blank=True
    )
    gpu_stats = models.JSONField(
        "GPU stats", default=list, blank=True, help_text="Per GPU, as the daemon last reported it (NVML)."
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    enrolment_token = models.ForeignKey(
        EnrolmentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="workers"
    )
    enrolled_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    heartbeat_timeout = models.DurationField(
        null=True, blank=True, help_text="The heartbeat timeout it was last told: never lost sooner."
    )
    lost_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pool__name", "hostname"]
        indexes = [models.Index(fields=["state", "last_heartbeat"], name="worker_state_heartbeat")]
        constraints = [
            models.UniqueConstraint(
                fields=["pool", "hostname"],
                condition=~models.Q(state="retired"),
                name="one_live_worker_per_host",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.hostname} ({self.pool})"


class TaskLog(models.Model):
    """The last lines a task wrote, as its worker last reported them."""

    MAX_CHARS = 16_000

    task = models.OneToOneField("tasks.Task", on_delete=models.CASCADE, related_name="log")
    worker = models.ForeignKey(Worker, null=True, on_delete=models.SET_NULL, related_name="+")
    tail = models.TextField(blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        verbose_name = "task log tail"

    def __str__(self) -> str:
        return f"log of {self.task}"


class WorkerSweep(models.Model):
    """When the sweep for lost workers last ran, and when it resumed after a gap: after an outage
    of the control plane every worker gets a full heartbeat timeout to check back in."""

    last_run_at = models.DateTimeField()
    resumed_at = models.DateTimeField()

    def __str__(self) -> str:
        return f"worker sweep, last run {self.last_run_at:%Y-%m-%d %H:%M:%S}"


class MaintenanceWindow(models.Model):
    """A planned outage of a pool (issue 35, rule 3): from ``starts_at`` until it ends the pool's
    capacity is 0 for the engine. Its running work is preempted at the start (reason
    ``maintenance``) and requeued at the front of its queue; before the start, work whose time
    limit would cross it is not placed there. ``ended_at``: when IT ended it early (before its
    start: called off). Writes: ``apps.pools.services.maintenance``, each audited."""

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="maintenance_windows")
    starts_at = models.DateTimeField("starts")
    ends_at = models.DateTimeField("ends", help_text="As scheduled; see ended early.")
    note = models.CharField(max_length=200, blank=True, help_text="What is done, shown to users.")
    ended_at = models.DateTimeField(
        "ended early", null=True, blank=True, help_text="When IT ended it before its scheduled end."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["starts_at", "pk"]
        verbose_name = "maintenance window"
        indexes = [models.Index(fields=["ends_at", "pool"], name="maintenance_ends_idx")]

    def __str__(self) -> str:
        return f"{self.pool} maintenance {self.starts_at:%Y-%m-%d %H:%M}–{self.end:%Y-%m-%d %H:%M} UTC"

    @property
    def end(self) -> datetime:
        """When it ends (or ended): early if IT ended it, else as scheduled."""
        return self.ended_at if self.ended_at is not None and self.ended_at < self.ends_at else self.ends_at

    @property
    def called_off(self) -> bool:
        return self.ended_at is not None and self.ended_at <= self.starts_at

    def in_force(self, now: datetime) -> bool:
        return not self.called_off and self.starts_at <= now < self.end

    def clean(self) -> None:
        """Start before end; no overlap with another window of the pool that is not called off."""
        if self.starts_at is None or self.ends_at is None:
            return
        if self.ends_at <= self.starts_at:
            raise ValidationError({"ends_at": "The end must be after the start."})
        if self.pool_id is None:
            return
        others = MaintenanceWindow.objects.filter(
            pool_id=self.pool_id, starts_at__lt=self.ends_at, ends_at__gt=self.starts_at
        ).exclude(pk=self.pk)
        for other in others:
            if not other.called_off and other.end > self.starts_at:
                raise ValidationError(
                    {"starts_at": f"It overlaps another maintenance window of {self.pool}: {other}."}
                )


class MaintenanceChange(AuditedChange):
    """The audit trail of maintenance windows: scheduled, changed, ended early."""

    class Via(models.TextChoices):
        ADMIN = "admin", "Admin"
        API = "api", "API"

    window = models.ForeignKey(MaintenanceWindow, on_delete=models.CASCADE, related_name="changes")
    via = models.CharField(max_length=10, choices=Via.choices, default=Via.ADMIN)
    changes = models.JSONField(help_text="{field: [before, after]} of each field that changed.")

    class Meta(AuditedChange.Meta):
        verbose_name = "maintenance window change"

    def __str__(self) -> str:
        return f"{self.window} changed at {self.at:%Y-%m-%d %H:%M:%S}"
