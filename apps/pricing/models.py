"""Prices per GPU-hour per GPU type, effective from a date. Prices are for reports only:
they never stop work."""

from decimal import Decimal

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
            from django.core.exceptions import ValidationError

            raise ValidationError({"currency": "Currency must be a three-letter ISO 4217 code, such as EUR."})
        if self.currency:
            self.currency = self.currency.upper()
