"""Change requests: a team lead or a department head asks the owner of the envelope above for more
reservation, limit or budget hours than their parent's envelope gives them, or for a new compute
resource; the owner approves (as asked or with changes) or denies with a comment."""

from django.conf import settings
from django.db import models

from apps.accounts.models import Group, Membership
from apps.policies.models import ComputeResource, PolicyChange, Profile, QuotaLoan, ResourcePolicy, gpu_field


class ChangeRequest(models.Model):
    class Kind(models.TextChoices):
        QUOTA = "quota", "Quota change"
        COMPUTE_RESOURCE = "compute_resource", "New compute resource"
        LOAN = "loan", "Dated quota loan"

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        APPROVED_WITH_CHANGES = "approved_with_changes", "Approved with changes"
        DENIED = "denied", "Denied"
        WITHDRAWN = "withdrawn", "Withdrawn"

    requester = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="change_requests"
    )
    group = models.ForeignKey(
        Group,
        on_delete=models.PROTECT,
        related_name="change_requests",
        help_text="The group whose resource policy would change, or that would get the compute resource.",
    )
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.QUOTA)
    reservation = gpu_field("reservation asked", null=True, blank=True)
    limit = gpu_field("limit asked", null=True, blank=True)
    budget_hours = models.DecimalField(
        "time budget asked (budget hours)", max_digits=12, decimal_places=3, null=True, blank=True
    )
    budget_period = models.CharField(
        "budget period asked", max_length=5, choices=ResourcePolicy.Period.choices, blank=True, default=""
    )
    profile = models.ForeignKey(
        Profile,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="For a new compute resource: the profile to connect.",
    )
    name = models.CharField(
        "compute resource name", max_length=120, blank=True, help_text="For a new compute resource."
    )
    lender = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="For a loan: the group that lends to the group of the request.",
    )
    loan_until = models.DateTimeField("lent until", null=True, blank=True, help_text="For a loan.")
    applied_loan = models.ForeignKey(
        QuotaLoan, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    justification = models.TextField()
    state = models.CharField(max_length=25, choices=State.choices, default=State.PENDING, db_index=True)
    approver_role = models.CharField(
        max_length=20, choices=Membership.Role.choices, help_text="The role that decides, set when filed."
    )
    approver_group = models.ForeignKey(
        Group,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="+",
        help_text="Whose holders of the approver role decide (with the groups above); empty: the estate.",
    )
    approver = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        help_text="Who decided.",
    )
    decision_comment = models.TextField(blank=True)
    applied_values = models.JSONField(default=dict, blank=True, help_text="The values applied on approval.")
    applied_change = models.ForeignKey(
        PolicyChange, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    compute_resource = models.ForeignKey(
        ComputeResource, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name = "change request"

    def __str__(self) -> str:
        return f"{self.get_kind_display()} for {self.group} by {self.requester} ({self.get_state_display()})"

    @property
    def asked_values(self) -> dict:
        """The values asked, as applied on approval as asked."""
        if self.kind == self.Kind.COMPUTE_RESOURCE:
            return {"profile": self.profile.name if self.profile_id else None, "name": self.name}
        asked = {
            f: getattr(self, f)
            for f in ("reservation", "limit", "budget_hours")
            if getattr(self, f) is not None
        }
        if self.budget_period:
            asked["budget_period"] = self.budget_period
        return asked
