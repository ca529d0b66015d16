"""The hardware: GPU types, pools with a declared capacity, and the worker daemons that serve them."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from apps.core.gpus import GPU_DECIMAL_PLACES, GPU_MAX_DIGITS, gpu_amount_error


class GpuType(models.Model):
    name = models.CharField(max_length=60, unique=True, help_text="For example A100-80GB, H100, L40S.")
    memory_gb = models.PositiveIntegerField(default=0, help_text="GPU memory in GB; 0 for CPU only.")

    class Meta:
        ordering = ["name"]
        verbose_name = "GPU type"

    def __str__(self) -> str:
        return self.name


class Pool(models.Model):
    class Kind(models.TextChoices):
        KUBERNETES = "kubernetes", "On-prem Kubernetes"
        BAREMETAL = "baremetal", "Bare metal and VMs"
        HPC = "hpc", "HPC cluster"
        CLOUD = "cloud", "Cloud and neocloud"

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
    enabled = models.BooleanField(default=True, help_text="A disabled pool receives no new work.")

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        error = self.capacity is not None and gpu_amount_error(self.capacity)
        if error:
            raise ValidationError({"capacity": f"Declared capacity: {error}"})


class Worker(models.Model):
    """A Klique worker daemon in a pool; it pulls work over outbound HTTPS."""

    class State(models.TextChoices):
        ACTIVE = "active", "Active"
        LOST = "lost", "Lost"
        RETIRED = "retired", "Retired"

    pool = models.ForeignKey(Pool, on_delete=models.CASCADE, related_name="workers")
    hostname = models.CharField(max_length=255)
    gpus = models.DecimalField(
        max_digits=GPU_MAX_DIGITS, decimal_places=GPU_DECIMAL_PLACES, default=Decimal("0")
    )
    state = models.CharField(max_length=10, choices=State.choices, default=State.ACTIVE)
    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    enrolled_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["pool__name", "hostname"]

    def __str__(self) -> str:
        return f"{self.hostname} ({self.pool})"
