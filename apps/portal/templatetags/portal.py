"""Template filters for the portal's figures."""

from django import template

from apps.portal import tables

register = template.Library()


@register.filter
def gpus(value) -> str:
    """A GPU amount with its three decimals."""
    return tables.gpus(value)


@register.filter
def hours(value) -> str:
    """Hours with three decimals."""
    return tables.hours(value)
