"""Further budget windows of a resource policy: time windows (budget hours per period) and money
windows (an amount in a currency per period), besides the time budget on the policy itself."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator
from django.db import models

from apps.core.currency import currency_error
from apps.policies.periods import Period
from klique import numbers


class BudgetWindow(models.Model):
    """A further budget window of a policy, besides the time budget on the policy itself
    (``budget_hours`` per ``budget_period``): e.g. 8 budget hours a day and 100 a month, or a
    money window of 500 EUR a month (the group's spend at the effective prices). Every window is
    enforced at once; at most one time window and one money window per period."""

    MONEY_DIGITS, MONEY_PLACES = 12, 4  # as apps.cloud.spend_caps.CAP_DIGITS / CAP_PLACES

    policy = models.ForeignKey(
        "policies.ResourcePolicy", on_delete=models.CASCADE, related_name="extra_budgets"
    )
    period = models.CharField("budget period", max_length=5, choices=Period.choices)
    hours = models.DecimalField(
        "time budget (budget hours)",
        max_digits=12,
        decimal_places=3,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Budget hours per period; empty for a money window.",
    )
    amount = models.DecimalField(
        "money budget",
        max_digits=MONEY_DIGITS,
        decimal_places=MONEY_PLACES,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Spend per period at the effective prices, in the currency; empty for a time window.",
    )
    currency = models.CharField(
        max_length=3, blank=True, default="", help_text="ISO 4217 code of the amount, e.g. EUR."
    )

    class Meta:
        ordering = ["policy", "period", "amount"]
        verbose_name = "further budget window"
        constraints = [
            models.CheckConstraint(
                condition=(
                    models.Q(hours__isnull=False, amount__isnull=True, currency="")
                    | (models.Q(hours__isnull=True, amount__isnull=False) & ~models.Q(currency=""))
                ),
                name="budget_window_hours_or_money",
                violation_error_message="A window has either budget hours or an amount and currency.",
            ),
            models.UniqueConstraint(
                fields=["policy", "period"],
                condition=models.Q(hours__isnull=False),
                name="budget_window_policy_period",
                violation_error_message="The policy has a time window for this period already.",
            ),
            models.UniqueConstraint(
                fields=["policy", "period"],
                condition=models.Q(amount__isnull=False),
                name="budget_window_policy_period_money",
                violation_error_message="The policy has a money window for this period already.",
            ),
        ]

    def __str__(self) -> str:
        if self.is_money:
            return f"{numbers.money(self.amount, self.currency)} per {self.period}"
        return f"{self.hours} h per {self.period}"

    @property
    def is_money(self) -> bool:
        return self.amount is not None

    def clean(self) -> None:
        errors = {}
        if self.amount is not None:
            if self.hours is not None:
                errors["hours"] = "A window has budget hours or an amount, not both."
            if error := currency_error(self.currency):
                errors["currency"] = error
            else:
                self.currency = self.currency.upper()
        elif self.hours is None:
            errors["hours"] = "Enter budget hours, or an amount and a currency."
        elif self.currency:
            errors["currency"] = "A time window has no currency."
        if errors:
            raise ValidationError(errors)
