"""The quota advisor over the API (docs/whatif.md, "Quota advisor"): the proposals a person may
see (their groups' rows) and acceptance of a group's proposal as a change request."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from apps.core.errors import refusal
from apps.core.fields import StrictCharField
from apps.whatif import advisor
from apps.whatif.models import AdvisorProposal


class MaySeeAdvisor(permissions.BasePermission):
    message = "The quota advisor is for department heads, leadership and IT admins."

    def has_permission(self, request, view) -> bool:
        return advisor.may_see_advisor(request.user)


class AdvisorProposalSerializer(serializers.ModelSerializer):
    run_state = serializers.CharField(source="run.state", default=None, read_only=True)
    groups = serializers.SerializerMethodField(
        help_text="Per group you may see: current, measured and proposed figures, the reasons, and whether "
        "anything changes."
    )

    class Meta:
        model = AdvisorProposal
        fields = ["id", "start", "end", "created_at", "goals", "run", "run_state", "groups", "accepted"]
        read_only_fields = fields

    def get_groups(self, proposal) -> list[dict]:
        return advisor.rows_for(proposal, self.context["request"].user)


class AdvisorAcceptSerializer(serializers.Serializer):
    group = StrictCharField(max_length=100, help_text="The group's slug.")
    reservation = serializers.DecimalField(max_digits=12, decimal_places=3, required=False, allow_null=True)
    limit = serializers.DecimalField(max_digits=12, decimal_places=3, required=False, allow_null=True)
    budget_hours = serializers.DecimalField(max_digits=12, decimal_places=3, required=False, allow_null=True)


class AdvisorAcceptedSerializer(serializers.Serializer):
    change_request = serializers.IntegerField()
    state = serializers.CharField()


class AdvisorProposalViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    """Quota advisor proposals, newest first, with the rows of the groups you may see."""

    queryset = AdvisorProposal.objects.select_related("run")
    serializer_class = AdvisorProposalSerializer
    permission_classes = [permissions.IsAuthenticated, MaySeeAdvisor]
    error_statuses = {"list": (403,), "retrieve": (403,), "accept": (400, 403)}

    @extend_schema(request=AdvisorAcceptSerializer, responses={201: AdvisorAcceptedSerializer})
    @action(detail=True, methods=["post"])
    def accept(self, request, pk=None):
        """File a group's proposal as a change request: the proposed figures, or those given
        (reservation, limit, budget_hours) edited first. 403 for a group you may not accept."""
        incoming = AdvisorAcceptSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = dict(incoming.validated_data)
        slug = data.pop("group")
        values = {k: v for k, v in data.items() if v is not None} or None
        try:
            filed = advisor.accept(self.get_object(), request.user, slug, values)
        except DjangoPermissionDenied as error:
            raise PermissionDenied(str(error)) from error
        except DjangoValidationError as error:
            raise refusal(error) from error
        body = {"change_request": filed.pk, "state": filed.state}
        return Response(AdvisorAcceptedSerializer(body).data, status=status.HTTP_201_CREATED)
