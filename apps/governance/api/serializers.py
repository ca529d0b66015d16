from rest_framework import serializers

from apps.accounts.models import Group
from apps.core.fields import GpuAmountField, PlainDecimalField, PlainIntegerField, StrictCharField
from apps.governance.models import ChangeRequest
from apps.governance.services import Decision
from apps.policies.models import Profile, ResourcePolicy


def hours_field(**kwargs):
    return PlainDecimalField(max_digits=12, decimal_places=3, min_value=0, **kwargs)


class ChangeRequestSerializer(serializers.ModelSerializer):
    group = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    requester = serializers.SlugRelatedField(slug_field="username", read_only=True)
    profile = serializers.SlugRelatedField(slug_field="name", read_only=True)
    approver = serializers.SlugRelatedField(slug_field="username", read_only=True)
    approver_group = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    lender = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = ChangeRequest
        fields = [
            "id",
            "group",
            "kind",
            "reservation",
            "limit",
            "budget_hours",
            "budget_period",
            "profile",
            "name",
            "lender",
            "loan_until",
            "applied_loan",
            "justification",
            "state",
            "requester",
            "approver_role",
            "approver_group",
            "approver",
            "decision_comment",
            "applied_values",
            "created_at",
            "decided_at",
        ]
        read_only_fields = fields


class FileRequestSerializer(serializers.Serializer):
    """A new request: quota values (each optional) for ``kind: quota``, or a profile (and a name)
    for ``kind: compute_resource``, or a lender, one quantity and ``loan_until`` for ``kind: loan``;
    a justification always."""

    group = serializers.SlugRelatedField(
        slug_field="slug", queryset=Group.objects.all(), help_text="Group slug."
    )
    kind = serializers.ChoiceField(choices=ChangeRequest.Kind.choices, default=ChangeRequest.Kind.QUOTA)
    reservation = GpuAmountField(required=False, allow_null=True, min_value=0)
    limit = GpuAmountField(required=False, allow_null=True, min_value=0)
    budget_hours = hours_field(required=False, allow_null=True)
    budget_period = serializers.ChoiceField(
        choices=ResourcePolicy.Period.choices, required=False, allow_blank=True, default=""
    )
    profile = serializers.SlugRelatedField(
        slug_field="name", queryset=Profile.objects.all(), required=False, allow_null=True
    )
    name = StrictCharField(max_length=120, required=False, allow_blank=True, default="")
    lender = serializers.SlugRelatedField(
        slug_field="slug",
        queryset=Group.objects.all(),
        required=False,
        allow_null=True,
        help_text="For kind loan: the group that would lend (group slug).",
    )
    loan_until = serializers.DateTimeField(required=False, allow_null=True, help_text="For kind loan.")
    justification = StrictCharField()


class ValuesSerializer(serializers.Serializer):
    reservation = GpuAmountField(required=False, allow_null=True, min_value=0)
    limit = GpuAmountField(required=False, allow_null=True, min_value=0)
    budget_hours = hours_field(required=False, allow_null=True)


class DecideSerializer(serializers.Serializer):
    decision = serializers.ChoiceField(choices=Decision.CHOICES)
    values = ValuesSerializer(required=False, help_text="The values to apply with approve_with_changes.")
    comment = StrictCharField(required=False, allow_blank=True, default="", help_text="Required to deny.")
    version = PlainIntegerField(
        required=False,
        min_value=1,
        help_text="The policy's version you saw; a policy saved since is refused (409).",
    )
