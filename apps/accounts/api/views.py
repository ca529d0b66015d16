from drf_spectacular.utils import extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from apps.accounts import selectors
from apps.accounts.api.serializers import MeSerializer


class MeView(APIView):
    """Who the token or session acts as: ``klique login`` checks a token with this."""

    @extend_schema(responses=MeSerializer)
    def get(self, request):
        user = request.user
        data = {
            "username": user.get_username(),
            "email": user.email,
            "roles": sorted(selectors.roles(user)),
            "memberships": user.memberships.select_related("group"),
        }
        return Response(MeSerializer(data).data)
