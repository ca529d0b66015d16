"""Deactivation and reactivation of a provisioned person (docs/governance.md, "SCIM
provisioning"). Deactivation, in one transaction: the account is made inactive, every portal
session of the person is deleted and every personal API token revoked, so the very next request
of either kind is refused; their new work is refused with them (an inactive user cannot sign in or
authenticate a token). Running work is left running: ``signals.user_deactivated`` lets the tasks
app tell the team leads who own it, who stop it or keep it."""

from importlib import import_module

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import User
from apps.accounts.services import revoke_api_tokens
from apps.scim.signals import user_deactivated


def end_sessions(user: User) -> int:
    """Delete the user's stored sessions (database-backed engines; with another engine the inactive
    account is refused at the next request all the same). The number deleted."""
    store = import_module(settings.SESSION_ENGINE).SessionStore
    if not hasattr(store, "get_model_class"):
        return 0
    model = store.get_model_class()
    ended = []
    for key, data in model.objects.filter(expire_date__gt=timezone.now()).values_list(
        "session_key", "session_data"
    ):
        if store().decode(data).get("_auth_user_id") == str(user.pk):
            ended.append(key)
    model.objects.filter(session_key__in=ended).delete()
    return len(ended)


@transaction.atomic
def deactivate(user: User, *, provider=None) -> None:
    User.objects.filter(pk=user.pk).update(is_active=False)
    user.is_active = False
    end_sessions(user)
    revoke_api_tokens(user=user)
    user_deactivated.send(sender=User, user=user, provider=provider)


@transaction.atomic
def reactivate(user: User) -> None:
    """The person may sign in again; their revoked tokens stay revoked."""
    User.objects.filter(pk=user.pk).update(is_active=True)
    user.is_active = True


def set_active(user: User, active: bool, *, provider=None) -> None:
    if user.is_active and not active:
        deactivate(user, provider=provider)
    elif active and not user.is_active:
        reactivate(user)
