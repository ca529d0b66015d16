"""Writes on identity providers: made with a token shown once, or given a new one."""

from django.core.exceptions import ValidationError
from django.db import transaction

from apps.scim.auth import new_token
from apps.scim.models import IdentityProvider


@transaction.atomic
def create_provider(*, name: str) -> tuple[IdentityProvider, str]:
    """A new provider and its token; the token is returned here and never again."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Name the identity provider, e.g. Entra ID."})
    if IdentityProvider.objects.filter(name=name).exists():
        raise ValidationError({"name": f"An identity provider named {name!r} exists already."})
    raw, prefix, token_hash = new_token()
    return IdentityProvider.objects.create(name=name, prefix=prefix, token_hash=token_hash), raw


@transaction.atomic
def rotate_token(provider: IdentityProvider) -> str:
    """A new token for the provider; the old one stops working at once."""
    raw, provider.prefix, provider.token_hash = new_token()
    provider.save(update_fields=["prefix", "token_hash"])
    return raw
