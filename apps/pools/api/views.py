"""Maintenance windows over the API: ``/api/v1/maintenance/``. Everyone signed in reads the
windows not over (users plan their work around them); IT schedules, moves and ends them early
(``apps.pools.services.maintenance``: checked and audited, via ``api``)."""

from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, permissions, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.accounts.models import Membership
from apps.accounts.selectors import has_role
from apps.core.errors import refusal
from apps.pools.models import MaintenanceChange, MaintenanceWindow, Pool
from apps.pools.selectors import windows_not_over
from apps.pools.services import maintenance

VIA = MaintenanceChange.Via.API


class WindowSerializer(serializers.ModelSerializer):
    pool = serializers.SlugRelatedField(slug_field="name", queryset=Pool.objects.all())
    end = serializers.DateTimeField(read_only=True, help_text="When it ends: early if ended early.")
    in_force = serializers.SerializerMethodField()
    note = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")

    class Meta:
        model = MaintenanceWindow
        fields = ["id", "pool", "starts_at", "ends_at", "end", "note", "ended_at", "in_force"]
        read_only_fields = ["id", "end", "ended_at", "in_force"]

    def get_in_force(self, window: MaintenanceWindow) -> bool:
        return window.in_force(timezone.now())


class ChangeWindowSerializer(serializers.Serializer):
    starts_at = serializers.DateTimeField(required=False)
    ends_at = serializers.DateTimeField(required=False)
    note = serializers.CharField(max_length=200, required=False, allow_blank=True)


class ItWrites(permissions.BasePermission):
    message = "Only IT schedules maintenance windows."

    def has_permission(self, request, view) -> bool:
        return request.method in permissions.SAFE_METHODS or has_role(request.user, Membership.Role.IT_ADMIN)


class MaintenanceViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet
):
    """Maintenance windows not over, in start order (``?all=1``: every window, for IT's history)."""

    queryset = MaintenanceWindow.objects.none()
    serializer_class = WindowSerializer
    permission_classes = [permissions.IsAuthenticated, ItWrites]

    def get_queryset(self):
        if self.action == "list" and self.request.query_params.get("all") != "1":
            return windows_not_over(timezone.now())
        return MaintenanceWindow.objects.select_related("pool").order_by("starts_at", "pk")

    def create(self, request):
        incoming = WindowSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        try:
            window = maintenance.schedule(
                data["pool"],
                starts_at=data["starts_at"],
                ends_at=data["ends_at"],
                note=data["note"],
                actor=request.user,
                via=VIA,
            )
        except DjangoValidationError as error:
            raise refusal(error) from error
        return Response(WindowSerializer(window).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=ChangeWindowSerializer, responses=WindowSerializer)
    def partial_update(self, request, pk=None):
        incoming = ChangeWindowSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            window = maintenance.change(
                self.get_object(), actor=request.user, via=VIA, **incoming.validated_data
            )
        except DjangoValidationError as error:
            raise refusal(error) from error
        return Response(WindowSerializer(window).data)

    @extend_schema(request=None, responses=WindowSerializer)
    @action(detail=True, methods=["post"])
    def end(self, request, pk=None):
        """End it now (before its start: call it off); the pool takes work at the next pass."""
        try:
            window = maintenance.end_now(self.get_object(), actor=request.user, via=VIA)
        except DjangoValidationError as error:
            raise refusal(error) from error
        return Response(WindowSerializer(window).data)
