"""Writes for groups and memberships. An IT admin membership makes the user staff in the admin
with the permissions of the "IT admins" auth group; losing the last one takes it away."""

from django.contrib.auth.models import Group as AuthGroup
from django.contrib.auth.models import Permission
from django.db import transaction

from apps.accounts.models import Group, Membership, Project, User
from apps.core.writes import validated_save

IT_ADMIN_AUTH_GROUP = "IT admins"
KLIQUE_APP_LABELS = ("accounts", "pools", "policies", "tasks", "engine", "ledger", "pricing", "portal")


def create_group(*, name: str, slug: str, kind: str, parent: Group | None = None) -> Group:
    return validated_save(Group(name=name, slug=slug, kind=kind, parent=parent))


def create_project(*, group: Group, name: str) -> Project:
    return validated_save(Project(group=group, name=name))


def it_admin_auth_group() -> AuthGroup:
    """The auth group holding every permission on Klique's own models (and users)."""
    group, _ = AuthGroup.objects.get_or_create(name=IT_ADMIN_AUTH_GROUP)
    perms = Permission.objects.filter(content_type__app_label__in=KLIQUE_APP_LABELS)
    group.permissions.set(perms)
    return group


def sync_staff(user: User) -> None:
    is_it = user.memberships.filter(role=Membership.Role.IT_ADMIN).exists()
    auth_group = it_admin_auth_group()
    if is_it:
        user.groups.add(auth_group)
    else:
        user.groups.remove(auth_group)
    if user.is_staff != is_it and not user.is_superuser:
        user.is_staff = is_it
        user.save(update_fields=["is_staff"])


@transaction.atomic
def add_membership(*, user: User, group: Group, role: str) -> Membership:
    membership, _ = Membership.objects.get_or_create(user=user, group=group, role=role)
    if role == Membership.Role.IT_ADMIN:
        sync_staff(user)
    return membership


@transaction.atomic
def remove_membership(membership: Membership) -> None:
    user, role = membership.user, membership.role
    membership.delete()
    if role == Membership.Role.IT_ADMIN:
        sync_staff(user)
