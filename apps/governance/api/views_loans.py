"""Dated quota loans over the API: ``/api/v1/loans/``. A person sees the loans of the groups they
belong to or see; whoever may split the quota above both groups lends at once (``POST``) and gives
back early; anyone else asks through ``/api/v1/change-requests/`` with ``kind: loan``."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from apps.accounts.models import Group
from apps.core.errors import refusal
from apps.core.fields import PlainDecimalField, StrictCharField
from apps.policies import loans
from apps.policies.models import QuotaLoan, ResourcePolicy
from apps.policies.selectors import visible_loans


class LoanSerializer(serializers.ModelSerializer):
    lender = serializers.CharField(source="lender.group.slug", read_only=True)
    borrower = serializers.CharField(source="borrower.group.slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    text = serializers.CharField(source="amount_text", read_only=True)

    class Meta:
        model = QuotaLoan
        fields = [
            "id",
            "lender",
            "borrower",
            "what",
            "amount",
            "period",
            "text",
            "starts_at",
            "ends_at",
            "state",
            "ended_at",
            "note",
            "via",
            "created_by",
            "revert_error",
        ]
        read_only_fields = fields


class LendSerializer(serializers.Serializer):
    lender = serializers.SlugRelatedField(
        slug_field="slug", queryset=Group.objects.all(), help_text="Group slug."
    )
    borrower = serializers.SlugRelatedField(
        slug_field="slug", queryset=Group.objects.all(), help_text="Group slug."
    )
    what = serializers.ChoiceField(choices=QuotaLoan.What.choices)
    amount = PlainDecimalField(max_digits=12, decimal_places=3, help_text="GPUs, or budget hours.")
    period = serializers.ChoiceField(
        choices=ResourcePolicy.Period.choices, required=False, allow_blank=True, default=""
    )
    until = serializers.DateTimeField(help_text="When it is given back (ISO 8601 with a time zone).")
    note = StrictCharField(max_length=200, required=False, allow_blank=True, default="")


def _policy(group: Group, field: str) -> ResourcePolicy:
    policy = ResourcePolicy.objects.select_related("group").filter(group=group).first()
    if policy is None:
        raise serializers.ValidationError({field: f"{group} has no resource policy."})
    return policy


class LoanViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    queryset = QuotaLoan.objects.none()
    serializer_class = LoanSerializer
    filterset_fields = ["state", "what"]

    def get_queryset(self):
        return visible_loans(self.request.user)

    @extend_schema(request=LendSerializer, responses={201: LoanSerializer})
    def create(self, request):
        incoming = LendSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        try:
            loan = loans.lend(
                _policy(data["lender"], "lender"),
                _policy(data["borrower"], "borrower"),
                what=data["what"],
                amount=data["amount"],
                until=data["until"],
                period=data["period"],
                note=data["note"],
                actor=request.user,
                via=QuotaLoan.Via.API,
            )
        except DjangoPermissionDenied as error:
            raise PermissionDenied(str(error)) from error
        except DjangoValidationError as error:
            raise refusal(error) from error
        return Response(LoanSerializer(loan).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses=LoanSerializer)
    @action(detail=True, methods=["post"], url_path="give-back")
    def give_back(self, request, pk=None):
        """Give the loan back now (its lender gets the quantity back)."""
        loan = self.get_object()
        if not loans.may_lend(request.user, loan.lender, loan.borrower):
            raise PermissionDenied("Only whoever may lend between these groups gives a loan back early.")
        try:
            loan = loans.give_back(loan, actor=request.user)
        except DjangoValidationError as error:
            raise refusal(error) from error
        return Response(LoanSerializer(loan).data)
