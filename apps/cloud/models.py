"""Cloud pools that grow and shrink: the provider and timeouts of a pool of kind cloud, its instance
types in the order they are tried, and every node the autoscaler launched (``docs/cloud.md``)."""

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from apps.core.audit import AuditedChange
from apps.core.currency import currency_error
from apps.pools.models import EnrolmentToken, Pool, Worker
from apps.pricing.models import Market
from klique import numbers
from klique.cloud.providers import PROVIDERS, provider_class

# Keys that would put a secret in the database; credentials come from the provider's own chain.
CREDENTIAL_KEYS = {
    "access_key_id",
    "secret_access_key",
    "session_token",
    "aws_access_key_id",
    "aws_secret_access_key",
    "aws_session_token",
    "password",
    "secret",
    "token",
    "api_key",
    "credentials",
}
DAY_S = 86400


def settings_errors(provider: str, settings) -> dict[str, str]:
    """Field -> reason for a pool's provider settings, the provider's own checks included."""
    if not isinstance(settings, dict):
        return {"settings": "an object of provider settings"}
    secrets = sorted(key for key in settings if str(key).lower() in CREDENTIAL_KEYS)
    if secrets:
        return {
            key: "credentials are never stored: they come from the environment or the instance role"
            for key in secrets
        }
    try:
        cls = provider_class(provider)
    except KeyError:
        return {"provider": f"not one of {', '.join(PROVIDERS)}"}
    except ImportError as error:
        return {"provider": str(error)}
    return cls.settings_errors(settings)


class CloudPool(models.Model):
    pool = models.OneToOneField(
        Pool, on_delete=models.CASCADE, related_name="cloud", limit_choices_to={"kind": Pool.Kind.CLOUD}
    )
    provider = models.CharField(max_length=20, choices=[(name, name) for name in PROVIDERS])
    settings = models.JSONField(
        "provider settings",
        default=dict,
        blank=True,
        help_text="Region, image, subnet... (docs/cloud.md). Never credentials: those come from the "
        "environment or the control plane's instance role.",
    )
    boot_timeout_s = models.PositiveIntegerField(
        "boot timeout (s)",
        default=600,
        validators=[MinValueValidator(60), MaxValueValidator(DAY_S)],
        help_text="A node not enrolled this long after launch is replaced (60 s to a day).",
    )
    idle_timeout_s = models.PositiveIntegerField(
        "idle timeout (s)",
        default=300,
        validators=[MinValueValidator(1), MaxValueValidator(DAY_S)],
        help_text="A node holding no task this long is released.",
    )
    spot_timeout_s = models.PositiveIntegerField(
        "spot timeout (s)",
        default=120,
        validators=[MinValueValidator(1), MaxValueValidator(DAY_S)],
        help_text="A spot node not running this long after launch is replaced on demand.",
    )
    enabled = models.BooleanField(default=True, help_text="Disabled: no node is launched or released.")

    class Meta:
        ordering = ["pool__name"]
        verbose_name = "cloud pool"

    def __str__(self) -> str:
        return f"{self.pool} ({self.provider})"

    def clean(self) -> None:
        errors = {}
        if self.pool_id and self.pool.kind != Pool.Kind.CLOUD:
            errors["pool"] = "Only a pool of kind cloud autoscales."
        problems = settings_errors(self.provider, self.settings)
        if "provider" in problems:
            errors["provider"] = problems.pop("provider")
        if problems:
            errors["settings"] = "; ".join(f"{field}: {reason}" for field, reason in problems.items())
        if errors:
            raise ValidationError(errors)


class InstanceType(models.Model):
    """A machine the pool launches; the first by rank that fits the waiting work is tried first."""

    cloud_pool = models.ForeignKey(CloudPool, on_delete=models.CASCADE, related_name="instance_types")
    name = models.CharField(max_length=60, help_text="The provider's name, e.g. p5.48xlarge.")
    gpus = models.PositiveIntegerField(
        "GPUs per instance", validators=[MinValueValidator(1), MaxValueValidator(1024)]
    )
    max_count = models.PositiveIntegerField("most instances", default=1)
    rank = models.PositiveIntegerField("order", default=0, help_text="Lower is tried first.")
    spot = models.BooleanField("try spot first", default=True)

    class Meta:
        ordering = ["cloud_pool", "rank", "pk"]
        constraints = [
            models.UniqueConstraint(fields=["cloud_pool", "name"], name="one_instance_type_per_name"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.gpus} GPUs, up to {self.max_count})"


class CloudNode(models.Model):
    """One node the autoscaler launched, from the decision to launch to its end."""

    class State(models.TextChoices):
        LAUNCHING = "launching", "Launching"
        BOOTING = "booting", "Booting"
        READY = "ready", "Ready"
        RELEASING = "releasing", "Releasing"
        TERMINATED = "terminated", "Terminated"

    SUPPLY_STATES = (State.LAUNCHING, State.BOOTING, State.READY)
    LIVE_STATES = (State.LAUNCHING, State.BOOTING, State.READY, State.RELEASING)

    Market = Market

    cloud_pool = models.ForeignKey(CloudPool, on_delete=models.CASCADE, related_name="nodes")
    instance_type = models.ForeignKey(InstanceType, on_delete=models.PROTECT, related_name="nodes")
    instance_type_name = models.CharField(
        "instance type name",
        max_length=60,
        help_text="The instance type's name as launched: the node is priced under it, whatever the type "
        "is renamed to later.",
    )
    gpus = models.PositiveIntegerField(
        "GPUs", help_text="The instance type's GPUs as launched: its usage pays its share of them."
    )
    market = models.CharField(max_length=10, choices=Market.choices)
    name = models.CharField(max_length=63, unique=True, help_text="The hostname its worker enrols with.")
    instance_id = models.CharField(max_length=80, blank=True)
    state = models.CharField(max_length=10, choices=State.choices, default=State.LAUNCHING)
    launched_at = models.DateTimeField()
    enrolled_at = models.DateTimeField(null=True, blank=True)
    idle_since = models.DateTimeField(null=True, blank=True)
    terminated_at = models.DateTimeField(null=True, blank=True)
    reason = models.CharField(max_length=300, blank=True, help_text="Why it was released or ended.")
    attempts = models.JSONField(
        default=list, blank=True, help_text="Each launch call: type, market and the provider's answer."
    )
    worker = models.ForeignKey(Worker, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    enrolment_token = models.ForeignKey(
        EnrolmentToken, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-launched_at", "-pk"]
        verbose_name = "cloud node"
        indexes = [models.Index(fields=["cloud_pool", "state"], name="cloud_node_pool_state")]

    def __str__(self) -> str:
        return self.name

    def save(self, *args, **kwargs):
        """Keep the instance type's name and GPUs as the node was launched: copied when the node is
        created without them and when it moves to another type (a fallback before its launch),
        never when the type is edited later."""
        fields = kwargs.get("update_fields")
        if self.instance_type_id and self._state.adding:
            self.instance_type_name = self.instance_type_name or self.instance_type.name
            self.gpus = self.gpus or self.instance_type.gpus
        elif self.instance_type_id and fields is not None and "instance_type" in fields:
            self.instance_type_name, self.gpus = self.instance_type.name, self.instance_type.gpus
            kwargs["update_fields"] = {*fields, "instance_type_name", "gpus"}
        super().save(*args, **kwargs)


# Leadership's cloud spend caps (``docs/cloud.md``, "Cloud spend caps").

CAP_KINDS = ("organisation", "business_unit")


class CloudSpendCap(models.Model):
    """How much cloud spend a month leadership accepts for the organisation or one business unit.
    Once the month's spend reaches it, no new cloud node is launched for that scope until the
    1st of next month (UTC)."""

    group = models.OneToOneField(
        "accounts.Group",
        on_delete=models.CASCADE,
        related_name="cloud_spend_cap",
        limit_choices_to={"kind__in": CAP_KINDS},
        help_text="The organisation or a business unit.",
    )
    amount = models.DecimalField(
        "monthly amount",
        max_digits=12,
        decimal_places=4,
        help_text="Cloud spend a UTC calendar month may reach; more than 0.",
    )
    currency = models.CharField(max_length=3, default="EUR", help_text="ISO 4217 code, for example EUR.")
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["group__name"]
        verbose_name = "cloud spend cap"

    def __str__(self) -> str:
        return f"{self.group}: {numbers.money(self.amount, self.currency)} a month"

    def clean(self) -> None:
        errors = {}
        if self.group_id and self.group.kind not in CAP_KINDS:
            errors["group"] = "A cloud spend cap is for the organisation or a business unit."
        if self.amount is not None and self.amount <= 0:
            errors["amount"] = "The monthly amount must be more than 0."
        if self.currency:
            if error := currency_error(self.currency):
                errors["currency"] = error
            else:
                self.currency = self.currency.upper()
        if errors:
            raise ValidationError(errors)


class CloudSpendCapChange(AuditedChange):
    """One change to a cloud spend cap: who, when, through which channel, before and after (the
    cap's fields as text, empty for a creation or a removal, readable after the cap is gone)."""

    class Action(models.TextChoices):
        SET = "set", "Set"
        CHANGED = "changed", "Changed"
        REMOVED = "removed", "Removed"

    class Via(models.TextChoices):
        PORTAL = "portal", "Portal"
        ADMIN = "admin", "Admin"
        API = "api", "API"

    cap = models.ForeignKey(
        CloudSpendCap, null=True, blank=True, on_delete=models.SET_NULL, related_name="changes"
    )
    group = models.ForeignKey("accounts.Group", on_delete=models.CASCADE, related_name="+")
    action = models.CharField(max_length=10, choices=Action.choices)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    via = models.CharField(max_length=10, choices=Via.choices)

    class Meta(AuditedChange.Meta):
        verbose_name = "cloud spend cap change"

    def __str__(self) -> str:
        return f"{self.get_action_display()} cloud spend cap of {self.group} at {self.at:%Y-%m-%d %H:%M}"


# The provider's bill (``docs/cloud.md``, "Reconciling the cloud bill").


class CloudBill(models.Model):
    """One imported AWS Cost and Usage Report 2.0 file of one UTC month: who imported it, when,
    and how many of its rows were kept; the kept rows (EC2 instance usage) are its ``lines``."""

    class Format(models.TextChoices):
        CSV = "csv", "CSV"
        CSV_GZIP = "csv.gz", "gzip'd CSV"
        PARQUET = "parquet", "Parquet"

    class Via(models.TextChoices):
        PORTAL = "portal", "Portal"
        API = "api", "API"

    month = models.DateField(help_text="The first day of the UTC month.")
    file_name = models.CharField(max_length=255)
    file_format = models.CharField(max_length=10, choices=Format.choices)
    currency = models.CharField(max_length=3, help_text="The lines' line_item_currency_code.")
    imported_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    imported_at = models.DateTimeField()
    via = models.CharField(max_length=10, choices=Via.choices)
    rows_read = models.PositiveIntegerField(help_text="Every row of the file.")
    rows_kept = models.PositiveIntegerField(help_text="EC2 instance usage of the month: the lines.")
    rows_other = models.PositiveIntegerField(
        help_text="Not EC2 instance usage: other services, tax, credits, fees, volumes, data transfer."
    )
    rows_outside = models.PositiveIntegerField(help_text="EC2 instance usage of another month.")
    lines_matched = models.PositiveIntegerField(help_text="Lines of an instance Klique launched.")

    class Meta:
        ordering = ["-month", "-imported_at", "-pk"]
        verbose_name = "cloud bill import"

    def __str__(self) -> str:
        return f"{self.file_name} ({self.month:%B %Y})"


class CloudBillLine(models.Model):
    """One EC2 instance usage row of an imported bill, with the Klique node of its instance id
    (empty: an instance Klique does not know). Amounts as the file has them, to 10 decimals."""

    bill = models.ForeignKey(CloudBill, on_delete=models.CASCADE, related_name="lines")
    instance_id = models.CharField(max_length=80, help_text="line_item_resource_id")
    instance_type = models.CharField(max_length=60, blank=True, help_text="product_instance_type")
    usage_start = models.DateTimeField()
    usage_end = models.DateTimeField()
    hours = models.DecimalField(max_digits=24, decimal_places=10, help_text="line_item_usage_amount")
    cost = models.DecimalField(max_digits=24, decimal_places=10, help_text="line_item_unblended_cost")
    rate = models.DecimalField(
        max_digits=24, decimal_places=10, null=True, blank=True, help_text="line_item_unblended_rate"
    )
    tagged_pool = models.CharField(
        max_length=80, blank=True, help_text="The instance's klique:pool tag, where the bill has it."
    )
    node = models.ForeignKey(CloudNode, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["usage_start", "pk"]
        indexes = [models.Index(fields=["bill", "instance_id"], name="cloud_bill_line_instance")]

    def __str__(self) -> str:
        return f"{self.instance_id} from {self.usage_start:%Y-%m-%d %H:%M}"


class CloudBillBooking(AuditedChange):
    """The difference between a pool's bill and what Klique charged for its nodes in a closed
    month, booked by finance as a ledger adjustment: at most one in force per pool and month."""

    class Via(models.TextChoices):
        PORTAL = "portal", "Portal"
        API = "api", "API"

    cloud_pool = models.ForeignKey(CloudPool, on_delete=models.PROTECT, related_name="bill_bookings")
    month = models.DateField(help_text="The closed month (its first day).")
    bill = models.ForeignKey(CloudBill, on_delete=models.PROTECT, related_name="bookings")
    adjustment = models.OneToOneField("ledger.Adjustment", on_delete=models.PROTECT, related_name="+")
    amount = models.DecimalField(max_digits=18, decimal_places=2, help_text="The bill - Klique.")
    currency = models.CharField(max_length=3)
    via = models.CharField(max_length=10, choices=Via.choices)

    class Meta(AuditedChange.Meta):
        verbose_name = "cloud bill booking"

    def __str__(self) -> str:
        return f"cloud bill of {self.cloud_pool} for {self.month:%B %Y} booked at {self.at:%Y-%m-%d %H:%M}"
