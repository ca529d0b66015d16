from django import template

from apps.webhooks import selectors

register = template.Library()


@register.filter
def may_configure_webhooks(user, group) -> bool:
    return selectors.may_configure(user, group)
