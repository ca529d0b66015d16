"""``Authorization: Bearer kqs_...``: an identity provider's SCIM token. Only a provider's token
opens /scim/v2/: a personal API token or a portal session does not."""

import hashlib
import secrets

from django.http import HttpRequest
from django.utils import timezone

from apps.scim.models import IdentityProvider

TOKEN_PREFIX = "kqs_"


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_token() -> tuple[str, str, str]:
    """A raw token, its shown prefix and its hash."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    return raw, raw[: len(TOKEN_PREFIX) + 6], hash_token(raw)


def provider_of(request: HttpRequest) -> IdentityProvider | None:
    scheme, _, raw = request.headers.get("Authorization", "").partition(" ")
    raw = raw.strip()
    if scheme.lower() != "bearer" or not raw.startswith(TOKEN_PREFIX):
        return None
    provider = IdentityProvider.objects.filter(token_hash=hash_token(raw), active=True).first()
    if provider is not None:
        now = timezone.now()
        if provider.last_used_at is None or (now - provider.last_used_at).total_seconds() >= 60:
            IdentityProvider.objects.filter(pk=provider.pk).update(last_used_at=now)
    return provider
