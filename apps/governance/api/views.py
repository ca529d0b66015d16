"""Change requests over the API: a person sees the requests they filed and those they may decide."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response

from apps.core.errors import refusal
from apps.governance import selectors, services
from apps.governance.api.serializers import ChangeRequestSerializer, DecideSerializer, FileRequestSerializer
from apps.governance.models import ChangeRequest
from apps.policies.services import QuotaChanged


class ChangeRequestViewSet(
    mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.CreateModelMixin, viewsets.GenericViewSet
):
    """Quota change requests and requests for a new compute resource."""

    queryset = ChangeRequest.objects.none()
    serializer_class = ChangeRequestSerializer
    filterset_fields = ["state", "kind"]

    def get_queryset(self):
        return selectors.visible_requests(self.request.user)

    @extend_schema(request=FileRequestSerializer, responses={201: ChangeRequestSerializer})
    def create(self, request):
        incoming = FileRequestSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        try:
            change = services.file_request(requester=request.user, **incoming.validated_data)
        except DjangoPermissionDenied as error:
            raise PermissionDenied(str(error)) from error
        except DjangoValidationError as error:
            raise refusal(error) from error
        return Response(ChangeRequestSerializer(change).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=DecideSerializer, responses={200: ChangeRequestSerializer})
    @action(detail=True, methods=["post"])
    def decide(self, request, pk=None):
        """Approve (as asked), approve with changes (``values``) or deny (``comment`` required)."""
        change = self.get_object()
        if not selectors.may_decide(request.user, change):
            raise PermissionDenied("Only the owner of the envelope above decides this request.")
        incoming = DecideSerializer(data=request.data)
        incoming.is_valid(raise_exception=True)
        data = incoming.validated_data
        values = {k: v for k, v in (data.get("values") or {}).items() if v is not None}
        try:
            change = services.decide(
                change,
                actor=request.user,
                decision=data["decision"],
                values=values,
                comment=data["comment"],
                version=data.get("version"),
            )
        except QuotaChanged as changed:
            return Response({"detail": changed.message}, status=status.HTTP_409_CONFLICT)
        except DjangoPermissionDenied as error:
            raise PermissionDenied(str(error)) from error
        except DjangoValidationError as error:
            raise refusal(error) from error
        return Response(ChangeRequestSerializer(change).data)
