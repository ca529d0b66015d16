"""Dated quota loans (issue 35, rule 4): GPUs of reservation or limit, or budget hours, lent by
one group's resource policy to another's until a date. The loan is applied at once as a quota
change of both policies and reverted when it ends, both through ``apps.policies.loans``; the
quota changes are in the ``PolicyChange`` trail (via ``loan``), and this row records the loan."""

from django.conf import settings
from django.db import models

from apps.policies.periods import Period
from klique import numbers


class QuotaLoan(models.Model):
    class What(models.TextChoices):
        RESERVATION = "reservation", "Reservation (GPUs)"
        LIMIT = "limit", "Limit (GPUs)"
        BUDGET_HOURS = "budget_hours", "Time budget (budget hours)"

    class State(models.TextChoices):
        ACTIVE = "active", "Lent"
        ENDED = "ended", "Given back"

    class Via(models.TextChoices):
        PORTAL = "portal", "Portal"
        API = "api", "API"
        ADMIN = "admin", "Admin"
        REQUEST = "request", "Approved change request"

    lender = models.ForeignKey("policies.ResourcePolicy", on_delete=models.PROTECT, related_name="loans_out")
    borrower = models.ForeignKey("policies.ResourcePolicy", on_delete=models.PROTECT, related_name="loans_in")
    what = models.CharField(max_length=12, choices=What.choices)
    amount = models.DecimalField(max_digits=12, decimal_places=3)
    period = models.CharField(
        "budget period",
        max_length=5,
        choices=Period.choices,
        blank=True,
        default="",
        help_text="For budget hours: the time budget window lent from.",
    )
    starts_at = models.DateTimeField("lent from")
    ends_at = models.DateTimeField("lent until", db_index=True)
    state = models.CharField(max_length=6, choices=State.choices, default=State.ACTIVE)
    ended_at = models.DateTimeField("given back at", null=True, blank=True)
    note = models.CharField(max_length=200, blank=True, help_text="Why, shown on both groups' pages.")
    via = models.CharField(max_length=10, choices=Via.choices, default=Via.PORTAL)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    ended_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who gave it back early; empty: it ended at its date.",
    )
    revert_error = models.TextField(
        blank=True,
        help_text="Why it could not be given back at its date (a rule the revert would break); it is "
        "tried again at each engine pass until it succeeds.",
    )

    class Meta:
        ordering = ["-starts_at", "-pk"]
        verbose_name = "dated quota loan"
        indexes = [models.Index(fields=["state", "ends_at"], name="loan_due_idx")]

    def __str__(self) -> str:
        until = f"{self.ends_at:%Y-%m-%d}"
        return f"{self.amount_text} from {self.lender.group} to {self.borrower.group} until {until}"

    @property
    def amount_text(self) -> str:
        """The amount in words, e.g. "2 GPUs of reservation" or "40 budget hours per week"."""
        if self.what == self.What.BUDGET_HOURS:
            return f"{numbers.hours(self.amount)} budget hours per {self.period}"
        return f"{numbers.gpus(self.amount)} GPUs of {self.what}"
