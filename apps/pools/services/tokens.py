"""Enrolment tokens: the secrets IT hands to a pool's worker daemons (issued, shown once, revoked),
and the shape of every daemon secret (an enrolment token's ``kqe_``, a worker token's ``kqw_``)."""

import secrets
from datetime import datetime

from django.core.exceptions import ValidationError

from apps.accounts.services import hash_token
from apps.pools.models import EnrolmentToken

ENROLMENT_PREFIX = "kqe_"
WORKER_PREFIX = "kqw_"


def new_secret(prefix: str) -> tuple[str, str]:
    raw = prefix + secrets.token_urlsafe(32)
    return raw, hash_token(raw)


def issue_enrolment_token(token: EnrolmentToken, *, created_by=None, now: datetime) -> str:
    """Save a new enrolment token (pool, name, expiry set); the token itself is returned here and
    never again."""
    token.name = (token.name or "").strip()
    if not token.name:
        raise ValidationError({"name": "Give the token a name, e.g. rack 12 or the login nodes."})
    if token.expires_at is not None and token.expires_at <= now:
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    raw, token.token_hash = new_secret(ENROLMENT_PREFIX)
    token.prefix, token.created_by = raw[: len(ENROLMENT_PREFIX) + 6], created_by
    token.save()
    return raw


def revoke_enrolment_token(token: EnrolmentToken, now: datetime) -> None:
    """No new worker enrols with it; workers that already did keep their own tokens."""
    EnrolmentToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)
