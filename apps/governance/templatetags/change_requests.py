from django import template

from apps.governance import selectors
from apps.policies.selectors import loans_of

register = template.Library()


@register.filter
def may_ask(user, group) -> bool:
    """``{% if request.user|may_ask:group %}``: whether the person may file a request for the group."""
    return selectors.may_ask(user, group)


@register.inclusion_tag("governance/_pending.html")
def pending_requests(user):
    """A line on an approver's page: how many change requests wait for their decision."""
    return {"count": selectors.requests_to_decide(user).count()}


@register.inclusion_tag("governance/_loans.html")
def group_loans(group, *, with_children: bool = False):
    """The dated quota loans in force in or out of ``group`` (and of the groups directly below it
    with ``with_children``), each with its date: on both groups' pages."""
    ids = [group.pk, *(group.children.values_list("pk", flat=True) if with_children else ())]
    return {"group": group, "loans": list(loans_of(ids))}
