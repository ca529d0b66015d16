"""Session kinds over the API, the session gateway's access question, and who a session is shared
with; sessions themselves are tasks (``/api/v1/tasks/`` with ``kind: "session"``)."""

from drf_spectacular.utils import extend_schema, extend_schema_view, inline_serializer
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.sessions import selectors, services
from apps.sessions.api.serializers import SessionKindSerializer, SharingSerializer
from apps.sessions.api.work.limits import TASK_ID_MAX
from apps.sessions.models import SessionKind

ACCESS = inline_serializer(
    "SessionAccess",
    {
        "session": serializers.IntegerField(),
        "worker": serializers.IntegerField(),
        "kind": serializers.CharField(),
    },
)


@extend_schema_view(list=extend_schema(summary="The session kinds IT offers"))
class SessionKindViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    queryset = SessionKind.objects.filter(enabled=True).order_by("name")
    serializer_class = SessionKindSerializer
    pagination_class = None
    filter_backends = []


class SessionAccessView(APIView):
    """The session gateway asks, with the browser's cookies, whether its person may open a session
    and on which worker it runs (docs/sessions.md). 401 without a login."""

    permission_classes = [AllowAny]
    error_statuses = {"get": (401, 403, 404, 409)}

    @extend_schema(summary="May the caller open this session, and where does it run", responses={200: ACCESS})
    def get(self, request, pk: int):
        if not request.user.is_authenticated:
            return Response({"detail": "Log in to the portal first."}, status=status.HTTP_401_UNAUTHORIZED)
        if pk > TASK_ID_MAX:
            return Response({"detail": "No such session."}, status=status.HTTP_404_NOT_FOUND)
        code, body = selectors.gateway_access(request.user, pk)
        return Response(body, status=code)


class SharingView(APIView):
    """Who else may open a session through the gateway: its owner reads and sets the list."""

    permission_classes = [IsAuthenticated]
    error_statuses = {"get": (404,), "put": (400, 404)}

    @extend_schema(summary="Who a session is shared with", responses={200: SharingSerializer})
    def get(self, request, pk: int):
        return Response(SharingSerializer.of(_owned(request.user, pk)))

    @extend_schema(
        summary="Share a session with these people",
        request=SharingSerializer,
        responses={200: SharingSerializer},
    )
    def put(self, request, pk: int):
        session = _owned(request.user, pk)
        serializer = SharingSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        services.share(session, serializer.validated_data["users"], by=request.user)
        return Response(SharingSerializer.of(session))


def _owned(user, pk: int):
    session = selectors.owned_session(user, pk) if pk <= TASK_ID_MAX else None
    if session is None:
        raise exceptions.NotFound("No session of yours has that id.")
    return session
