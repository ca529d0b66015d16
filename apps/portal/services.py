"""Writes from the portal: a team's members, notifications read. The quota split is the
policies' (``apps.policies.split``)."""

from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership, User


def add_member(*, group: Group, user: User) -> Membership:
    """A team lead lets a person use the group's share: they may then submit to its compute resources."""
    if not user.is_active:
        raise ValidationError({"user": f"{user} is deactivated."})
    if group.memberships.filter(user=user).exists():
        raise ValidationError({"user": f"{user} is already in {group}."})
    return accounts.add_membership(user=user, group=group, role=Membership.Role.MEMBER)


def remove_member(membership: Membership) -> None:
    """Only plain memberships are the team lead's to remove; roles are IT's to change."""
    if membership.role != Membership.Role.MEMBER:
        raise ValidationError({"membership": f"{membership} is a role, which IT changes in the admin."})
    accounts.remove_membership(membership)


def mark_read(notifications) -> int:
    """Mark the given notifications read; returns how many were unread."""
    return notifications.filter(read_at__isnull=True).update(read_at=timezone.now())


def mark_unread(notifications) -> int:
    return notifications.exclude(read_at__isnull=True).update(read_at=None)
