"""Prices per GPU-hour per GPU type and currency, effective from a date, and the audit trail of
every change to them. Prices are for reports only: they never stop work."""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models


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
        return f"{self.gpu_type} {self.per_gpu_hour} {self.currency}/GPU-hour from {self.effective_from}"

    def clean(self) -> None:
        if self.currency and (len(self.currency) != 3 or not self.currency.isalpha()):
            raise ValidationError({"currency": "Currency must be a three-letter ISO 4217 code, such as EUR."})
        if self.currency:
            self.currency = self.currency.upper()


class PriceChange(models.Model):
    """One change to the price list: who made it, when, through which channel, before and after.

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
    gpu_type = models.ForeignKey("pools.GpuType", on_delete=models.PROTECT, related_name="+")
    currency = models.CharField(max_length=3)
    action = models.CharField(max_length=10, choices=Action.choices)
    before = models.JSONField(default=dict, blank=True)
    after = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    via = models.CharField(max_length=10, choices=Via.choices)
    at = models.DateTimeField(db_index=True)

    class Meta:
        ordering = ["-at", "-pk"]
        verbose_name = "price change"

    def __str__(self) -> str:
        return (
            f"{self.get_action_display()} {self.gpu_type} {self.currency} price at {self.at:%Y-%m-%d %H:%M}"
        )
