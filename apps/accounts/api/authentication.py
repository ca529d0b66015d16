"""``Authorization: Bearer kqp_...``: a personal API token acting as its user. An agent's token
acts as its owner (``request.user``) and names the agent (``request.auth.agent``); a stopped
agent's token is refused.

A bearer token without the personal prefix is left to the other authentication classes (worker
tokens share the scheme), so this class returns None for it instead of refusing it.
"""

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from apps.accounts import selectors, services


def agent_of(request):
    """The agent whose token made the request (``apps.accounts.agents``), or None."""
    token = request.auth
    return token.agent if getattr(token, "agent_id", None) else None


class PersonalTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if len(parts) != 2 or parts[0].lower() != self.keyword.lower().encode():
            return None
        try:
            raw = parts[1].decode()
        except UnicodeDecodeError:
            return None
        if not raw.startswith(services.TOKEN_PREFIX):
            return None
        token = selectors.api_token_by_hash(services.hash_token(raw))
        now = timezone.now()
        if token is None:
            raise exceptions.AuthenticationFailed("Unknown API token.")
        status = token.status_at(now)
        if status == "revoked":
            raise exceptions.AuthenticationFailed("This API token was revoked.")
        if status == "expired":
            raise exceptions.AuthenticationFailed("This API token has expired; create a new one.")
        if not token.user.is_active:
            raise exceptions.AuthenticationFailed("The token's user is inactive.")
        if token.agent_id is not None and token.agent.stopped:
            raise exceptions.AuthenticationFailed(f"Agent {token.agent.name} was stopped (kill switch).")
        services.mark_api_token_used(token, now)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


class PersonalTokenScheme(OpenApiAuthenticationExtension):
    target_class = PersonalTokenAuthentication
    name = "personalToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A personal API token (kqp_...) created at /account/tokens/.",
        }
