"""What-if runs over the API: IT admins start a replay of a recorded period under their changes,
follow its progress and read its comparison (JSON, or CSV once done)."""

import csv
import io

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, permissions, renderers, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from apps.accounts.models import Membership
from apps.accounts.selectors import has_role
from apps.whatif import runs, selectors, services
from apps.whatif.api.serializers import StartRunSerializer, WhatIfRunDetailSerializer, WhatIfRunSerializer
from apps.whatif.models import WhatIfRun


class IsItAdmin(permissions.BasePermission):
    message = "Only IT admins run what-if replays."

    def has_permission(self, request, view) -> bool:
        return has_role(request.user, Membership.Role.IT_ADMIN)


class CsvRenderer(renderers.BaseRenderer):
    """Lets a client that accepts only ``text/csv`` ask for the CSV; a refusal is its ``detail``."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return str(data.get("detail", data) if isinstance(data, dict) else data).encode()


class WhatIfRunViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet
):
    """Saved what-if runs, newest first (IT admins only)."""

    queryset = WhatIfRun.objects.none()
    serializer_class = WhatIfRunDetailSerializer
    permission_classes = [permissions.IsAuthenticated, IsItAdmin]
    error_statuses = {"list": (403,), "retrieve": (403,), "create": (403,), "csv": (403, 409)}

    def get_queryset(self):
        runs.fail_stale_runs()  # so a poller sees a run whose job died as failed, not running
        found = selectors.runs()
        return found if self.action == "list" else found.defer(None)

    def get_serializer_class(self):
        return WhatIfRunSerializer if self.action == "list" else WhatIfRunDetailSerializer

    @extend_schema(request=StartRunSerializer, responses={201: WhatIfRunDetailSerializer})
    def create(self, request):
        """Check the run in full and queue it (queue ``whatif``); bad input answers 400 naming the
        field. Poll the run until its state is ``done`` or ``failed``."""
        incoming = StartRunSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            run = services.start_run(request.user, services.RunRequest(**incoming.validated_data))
        except services.RunError as error:
            raise serializers.ValidationError({error.field: [error.message]}) from error
        return Response(WhatIfRunDetailSerializer(run).data, status=status.HTTP_201_CREATED)

    @extend_schema(
        responses={
            (200, "text/csv"): OpenApiResponse(
                OpenApiTypes.STR, description="metric,name,base,changed,difference"
            ),
        }
    )
    @action(detail=True, methods=["get"], renderer_classes=[renderers.JSONRenderer, CsvRenderer])
    def csv(self, request, pk=None):
        """The comparison as CSV (docs/whatif.md, "CSV"); 409 while the run is not done."""
        run = self.get_object()
        if run.state != WhatIfRun.State.DONE:
            detail = f"The run is {run.state}: its CSV exists once it is done."
            return Response({"detail": detail}, status=status.HTTP_409_CONFLICT)
        out = io.StringIO()
        csv.writer(out, lineterminator="\n").writerows(selectors.csv_rows(run))
        response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="whatif-{run.pk}.csv"'
        return response
