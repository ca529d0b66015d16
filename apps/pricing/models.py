"""Prices per GPU-hour per GPU type and currency, and per node-hour per cloud instance type, market
and currency, each effective from a date, and the audit trail of every change to them. Prices are
for reports only: they never stop work."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from apps.core.audit import AuditedChange
from apps.core.currency import currency_error
from klique import numbers


def clean_currency(currency: str) -> str:
    """The ISO 4217 code in capitals; a ValidationError on the field otherwise."""
    if currency and (error := currency_error(currency)):
        raise ValidationError({"currency": error})
    return currency.upper() if currency else currency


class Market(models.TextChoices):
    """How a cloud node is bought, and so priced: spot or on demand (``apps.cloud``'s nodes use it)."""

    SPOT = "spot", "Spot"
    ON_DEMAND = "on-demand", "On demand"


class Price(models.Model):
    gpu_type = models.ForeignKey("pools.GpuType", on_delete=models.PROTECT, related_name="prices")
    currency = models.CharField(max_length=3, default="EUR", help_text="ISO 4217 code, for example EUR.")
    per_gpu_hour = models.DecimalField(
        "price per GPU-hour", max_digits=12, decimal_places=4, validators=[MinValueValidator(Decimal("0"))]
    )
    effective_from = models.DateField(help_text="Applies from 00:00 UTC of this day until the next price.")

    class Meta:
        ordering = ["gpu_type__name", "currency", "-effective_from"]
        constraints = [
            models.UniqueConstraint(
                fields=["gpu_type", "currency", "effective_from"], name="price_unique_per_day"
            ),
        ]

    def __str__(self) -> str:
        price = numbers.price(self.per_gpu_hour, self.currency)
        return f"{self.gpu_type} {price}/GPU-hour from {self.effective_from}"

    def clean(self) -> None:
        self.currency = clean_currency(self.currency)


class NodePrice(models.Model):
    """What one cloud node of an instance type costs per hour on a market (spot or on demand).

    The instance type is the provider's name, not a reference: one price list serves every cloud
    pool that launches the type."""

    instance_type = models.CharField(max_length=60, help_text="The provider's name, e.g. p5.48xlarge.")
    market = models.CharField(max_length=10, choices=Market.choices)
    currency = models.CharField(max_length=3, default="EUR", help_text="ISO 4217 code, for example EUR.")
    per_node_hour = models.DecimalField(
        "price per node-hour", max_digits=12, decimal_places=4, validators=[MinValueValidator(Decimal("0"))]
    )
    effective_from = models.DateField(
        help_text="Applies from 00:00 UTC of this day until the next price of the same instance type, "
        "market and currency."
    )

    class Meta:
        ordering = ["instance_type", "market", "currency", "-effective_from"]
        verbose_name = "node price"
        constraints = [
            models.UniqueConstraint(
                fields=["instance_type", "market", "currency", "effective_from"],
                name="node_price_unique_per_day",
            ),
        ]

    def __str__(self) -> str:
        price = numbers.price(self.per_node_hour, self.currency)
        return f"{self.instance_type} {self.market} {price}/node-hour from {self.effective_from}"

    def clean_fields(self, exclude=None) -> None:
        """The instance type and currency are stripped before they are checked: "  " is no name."""
        if isinstance(self.instance_type, str):
            self.instance_type = self.instance_type.strip()
        if isinstance(self.currency, str):
            self.currency = self.currency.strip()
        super().clean_fields(exclude)

    def clean(self) -> None:
        self.currency = clean_currency(self.currency)


class PriceChange(AuditedChange):
    """One change to the price list, a GPU price or a node price: who made it, when, through which
    channel, before and after. A GPU price's change names its ``gpu_type``; a node price's its
    ``instance_type`` and ``market``.

    ``before`` and ``after`` hold the price's fields as text (empty for a creation or a deletion),
    so the record stays readable after the price itself is deleted.
    """

    class Action(models.TextChoices):
        CREATED = "created", "Created"
        CHANGED = "changed", "Changed"
        DELETED = "deleted", "Deleted"

    class Via(models.TextChoices):
        PORTAL = "portal", "Portal"
        ADMIN = "admin", "Admin"
        API = "api", "API"
        SYSTEM = "system", "System"

    price = models.ForeignKey(Price, null=True, blank=True, on_delete=models.SET_NULL, related_name="changes")
    node_price = models.ForeignKey(
        NodePrice, null=True, blank=True, on_delete=models.SET_NULL, related_name="changes"
    )
    gpu_type = models.ForeignKey(
        "pools.GpuType", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    instance_type = models.CharField(max_length=60, blank=True, help_text="A node price's instance type.")
    market = models.CharField(max_length=10, blank=True, choices=Market.choices)
    currency = models.CharField(max_length=3)
    action = models.CharField(max_length=10, choices=Action.choices)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    via = models.CharField(max_length=10, choices=Via.choices)

    class Meta(AuditedChange.Meta):
        verbose_name = "price change"

    def __str__(self) -> str:
        return f"{self.get_action_display()} {self.priced} {self.currency} price at {self.at:%Y-%m-%d %H:%M}"

    @property
    def priced(self) -> str:
        """What the price is for: a GPU type, or an instance type and market."""
        if self.gpu_type_id:
            return str(self.gpu_type)
        return f"{self.instance_type} ({self.get_market_display()})"
