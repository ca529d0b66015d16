"""Reads of webhooks: who may configure a group's, a group's webhooks and its delivery log."""

from apps.accounts.models import Group, Membership, User
from apps.accounts.selectors import groups_with_role, has_role
from apps.webhooks.models import Webhook, WebhookDelivery

Role = Membership.Role


def may_configure(user: User, group: Group) -> bool:
    """IT (also in the admin), and the department head or team lead of the group itself: a head's
    webhook already gets the events of the groups below."""
    if has_role(user, Role.IT_ADMIN):
        return True
    return group.pk in groups_with_role(user, Role.DEPARTMENT_HEAD, Role.TEAM_LEAD)


def webhooks_of(group: Group):
    return Webhook.objects.filter(group=group).order_by("pk")


def deliveries_of(group: Group, limit: int = 20) -> list[WebhookDelivery]:
    return list(WebhookDelivery.objects.filter(webhook__group=group).select_related("webhook")[:limit])
