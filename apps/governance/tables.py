"""The portal's tables of change requests (django-tables2)."""

import django_tables2 as tables
from django.urls import reverse
from django.utils.html import format_html

from apps.governance.models import ChangeRequest
from apps.policies.rules import fmt


def asked_text(request: ChangeRequest) -> str:
    values = request.asked_values
    return "; ".join(
        f"{k.replace('_', ' ')} {fmt(v) if k in ('reservation', 'limit', 'budget_hours') else v}"
        for k, v in values.items()
    )


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
