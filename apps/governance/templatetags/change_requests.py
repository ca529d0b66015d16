from django import template

from apps.governance import selectors

register = template.Library()


@register.filter
def may_ask(user, group) -> bool:
    """``{% if request.user|may_ask:group %}``: whether the person may file a request for the group."""
    return selectors.may_ask(user, group)


@register.inclusion_tag("governance/_pending.html")
def pending_requests(user):
    """A line on an approver's page: how many change requests wait for their decision."""
    return {"count": selectors.requests_to_decide(user).count()}
