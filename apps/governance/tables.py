"""The portal's tables of change requests (django-tables2)."""

import django_tables2 as tables
from django.urls import reverse
from django.utils.html import format_html

from apps.governance.models import ChangeRequest
from klique import numbers


def value_text(field: str, value) -> str:
    """One asked or applied value as a person reads it (as ``governance/_values.html`` writes
    it): "limit 190 GPUs", "budget hours 2,000", "per month"."""
    if field in ("reservation", "limit"):
        return f"{field} {numbers.plural(value, 'GPU', figure=numbers.gpus)}"
    if field == "budget_hours":
        return f"budget hours {numbers.hours(value)}"
    if field == "budget_period":
        return f"per {value}"
    if field == "until":
        return f"until {str(value)[:10]} {str(value)[11:16]} UTC"
    return f"{field.replace('_', ' ')} {value}"


def values_text(values: dict) -> str:
    return "; ".join(value_text(field, value) for field, value in values.items())


def asked_text(request: ChangeRequest) -> str:
    return values_text(request.asked_values)


class ChangeRequestTable(tables.Table):
    created_at = tables.DateTimeColumn(format="Y-m-d H:i", verbose_name="Filed (UTC)")
    group = tables.Column(accessor="group__name", order_by="group__name")
    kind = tables.Column()
    asked = tables.Column(empty_values=(), orderable=False, verbose_name="Asked")
    requester = tables.Column(verbose_name="By")
    state = tables.Column()
    approver = tables.Column(verbose_name="Decided by", default="—")
    decision_comment = tables.Column(verbose_name="Comment", orderable=False)
    open = tables.Column(empty_values=(), orderable=False, verbose_name="", exclude_from_export=True)

    class Meta:
        model = ChangeRequest
        fields = []
        attrs = {"class": "grid"}
        empty_text = "No requests."

    def render_asked(self, record):
        return asked_text(record)

    def value_asked(self, record):
        return asked_text(record)

    def render_open(self, record):
        return format_html('<a href="{}">Open</a>', reverse("portal:request", args=[record.pk]))
