"""Writes for groups and memberships. An IT admin, finance or tenant admin membership makes the
user staff in the admin with that role's auth group ("IT admins": everything; "Finance": prices;
"Tenant admins": groups, members, policies and compute resources, limited to their subtree);
losing the last such membership takes both away."""

import hashlib
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import Group as AuthGroup
from django.contrib.auth.models import Permission
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from apps.accounts.models import ApiToken, Group, Membership, Project, User
from apps.core.writes import validated_save

IT_ADMIN_AUTH_GROUP = "IT admins"
KLIQUE_APP_LABELS = (
    "accounts",
    "pools",
    "policies",
    "tasks",
    "engine",
    "ledger",
    "pricing",
    "portal",
    "cloud",
    "klique_sessions",
    "webhooks",
    "governance",
    "whatif",
)


def create_group(
    *, name: str, slug: str, kind: str, parent: Group | None = None, cost_centre: str = ""
) -> Group:
    return validated_save(Group(name=name, slug=slug, kind=kind, parent=parent, cost_centre=cost_centre))


def create_project(*, group: Group, name: str) -> Project:
    return validated_save(Project(group=group, name=name))


CRUD = ("view", "add", "change", "delete")


def _all(*models: str) -> tuple[str, ...]:
    pairs = (model.split(".") for model in models)
    return tuple(f"{app}.{action}_{name}" for app, name in pairs for action in CRUD)


# A tenant admin's permissions; the admin limits each to their subtree (``apps.accounts.admin_scope``).
TENANT_PERMISSIONS = (
    *_all("accounts.group", "accounts.membership", "accounts.project"),
    *_all("policies.resourcepolicy", "policies.budgetwindow", "policies.computeresource"),
    "policies.view_policychange",
)

# Roles that work in the Django admin, each with the auth group that holds its permissions: whole
# apps by label, or single permissions as "app.codename".
STAFF_ROLES = {
    Membership.Role.IT_ADMIN: ("IT admins", None),
    Membership.Role.FINANCE: ("Finance", ("pricing",)),
    Membership.Role.TENANT_ADMIN: ("Tenant admins", TENANT_PERMISSIONS),
}


def staff_auth_group(role: str) -> AuthGroup:
    """The auth group of a staff role: IT admins hold every permission on Klique's own models;
    finance holds the pricing permissions (prices and their audit trail); tenant admins hold those
    on groups, memberships, projects, policies and compute resources."""
    name, labels = STAFF_ROLES[role]
    labels = labels or KLIQUE_APP_LABELS
    wanted = Q(content_type__app_label__in=[label for label in labels if "." not in label])
    for label in labels:
        if "." in label:
            app, codename = label.split(".")
            wanted |= Q(content_type__app_label=app, codename=codename)
    group, _ = AuthGroup.objects.get_or_create(name=name)
    group.permissions.set(Permission.objects.filter(wanted))
    return group


def sync_staff(user: User) -> None:
    """Staff in the admin, with each staff role's permissions, exactly while a membership gives
    the user an IT admin or finance role."""
    held = set(user.memberships.filter(role__in=STAFF_ROLES).values_list("role", flat=True))
    for role in STAFF_ROLES:
        auth_group = staff_auth_group(role)
        if role in held:
            user.groups.add(auth_group)
        else:
            user.groups.remove(auth_group)
    staff = bool(held)
    if user.is_staff != staff and not user.is_superuser:
        user.is_staff = staff
        user.save(update_fields=["is_staff"])


@transaction.atomic
def add_membership(*, user: User, group: Group, role: str) -> Membership:
    membership, _ = Membership.objects.get_or_create(user=user, group=group, role=role)
    if role in STAFF_ROLES:
        sync_staff(user)
    return membership


@transaction.atomic
def remove_membership(membership: Membership) -> None:
    user, role = membership.user, membership.role
    membership.delete()
    if role in STAFF_ROLES:
        sync_staff(user)


# Personal API tokens. A token is ``kqp_`` and 43 random URL-safe characters; only its SHA-256 is
# stored. The prefix tells personal tokens from worker tokens, which share the Bearer scheme.

TOKEN_PREFIX = "kqp_"
LAST_USED_EVERY = timedelta(minutes=1)


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_api_token(*, user: User, name: str) -> tuple[ApiToken, str]:
    """An unsaved token for ``user`` and the raw token it is the hash of (the one token format)."""
    raw = TOKEN_PREFIX + secrets.token_urlsafe(32)
    token = ApiToken(user=user, name=name, prefix=raw[: len(TOKEN_PREFIX) + 6], token_hash=hash_token(raw))
    return token, raw


def create_api_token(*, user: User, name: str, expires_at: datetime | None = None) -> tuple[ApiToken, str]:
    """A new token for ``user``; the token itself is returned here and never again."""
    name = (name or "").strip()
    if not name:
        raise ValidationError({"name": "Give the token a name, e.g. laptop or nightly pipeline."})
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    token, raw = new_api_token(user=user, name=name)
    token.expires_at = expires_at
    token.full_clean(exclude=["token_hash", "prefix"])
    token.save()
    return token, raw


def revoke_api_token(token: ApiToken) -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
    return token


def revoke_api_tokens(*, at: datetime | None = None, **which) -> int:
    """Revoke at once every live token matching ``which`` (``user=...``, ``agent=...``); the number."""
    live = ApiToken.objects.filter(revoked_at__isnull=True, **which)
    return live.update(revoked_at=at or timezone.now())


def mark_api_token_used(token: ApiToken, now: datetime) -> None:
    """Record use at most once a minute, so that every request does not write."""
    if token.last_used_at is None or now - token.last_used_at >= LAST_USED_EVERY:
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        token.last_used_at = now


def set_project_priority(project: Project, priority) -> Project:
    """Which of the group's projects runs first (lower first); the engine orders waiting work by it."""
    return validated_save(project, priority=priority)
