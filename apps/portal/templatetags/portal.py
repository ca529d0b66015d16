"""Template filters for the portal's figures."""

from django import template

from apps.portal import tables, words
from klique import numbers

register = template.Library()


@register.filter
def gpus(value) -> str:
    """A GPU amount as a person reads it (klique/numbers.py)."""
    return numbers.gpus(value)


@register.filter
def task_gpus(task) -> str:
    """A task's size: its GPUs, or its nodes times its GPUs per node ("2 x 4.000")."""
    return tables.task_gpus(task)


@register.filter
def hours(value) -> str:
    """Hours with at most one decimal (klique/numbers.py)."""
    return numbers.hours(value)


@register.filter
def milliseconds(value) -> str:
    """A duration in ms with at most one decimal and no trailing zero (klique/numbers.py)."""
    return numbers.milliseconds(value)


@register.filter
def hours_left(value) -> str:
    """The hours left of a time budget: "used up" at or below zero."""
    return numbers.hours_left(value)


@register.filter
def money(value, currency: str = "") -> str:
    """An amount with its currency's symbol."""
    return numbers.money(value, currency)


@register.filter
def stop_reason(code: str):
    """A stop reason in the reference's words, explained on hover."""
    return words.explained(*words.stop_reason(code)) if code else "—"


@register.filter
def notification_message(notification) -> str:
    """A notification's message, linked to what it is about when it has a link."""
    return tables.notification_message(notification)


@register.filter
def run_out(status) -> str:
    """When a time budget runs out at the burn rate, or that it lasts until its reset."""
    return tables.run_out(status)


@register.simple_tag(takes_context=True)
def kept_params(context, found, table) -> list[tuple[str, str]]:
    """The query's other parameters (the other tables' filters, sorting and pages), which a table's
    filter form keeps as hidden fields; its own fields and its table's page are left out."""
    own = {field.html_name for field in found.form} | {table.prefixed_page_field, "export", "table"}
    query = context["request"].GET
    return [(name, value) for name, values in query.lists() if name not in own for value in values]
