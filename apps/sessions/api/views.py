"""Session kinds over the API; sessions themselves are tasks (``/api/v1/tasks/`` with
``kind: "session"``)."""

from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, viewsets

from apps.sessions.api.serializers import SessionKindSerializer
from apps.sessions.models import SessionKind


@extend_schema_view(list=extend_schema(summary="The session kinds IT offers"))
class SessionKindViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    queryset = SessionKind.objects.filter(enabled=True).order_by("name")
    serializer_class = SessionKindSerializer
    pagination_class = None
    filter_backends = []
