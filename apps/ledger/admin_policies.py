"""The resource policies' admin, registered here with each policy's use from the ledger in its list:
GPUs in use (subtree), borrowed, the time budget's windows, budget hours used and left, projected
run-out. The form, inlines and audited saves are the policies app's (``apps.policies.admin``)."""

from contextvars import ContextVar
from decimal import Decimal

from django.contrib import admin
from django.utils.html import format_html_join
from django.utils.safestring import mark_safe

from apps.ledger.budgets import budget_status
from apps.policies import admin as policies_admin
from apps.policies.models import ResourcePolicy
from klique import numbers

_budget_statuses: ContextVar[dict | None] = ContextVar("budget_statuses", default=None)


@admin.register(ResourcePolicy)
class ResourcePolicyAdmin(policies_admin.ResourcePolicyAdmin):
    """Policies with live columns: GPUs in use (subtree), borrowed, waiting, budget used and left."""

    # Ten columns, figures as klique/numbers.py writes them: the list fits 1,400 px (admin.css).
    list_display = [
        "group",
        "reserved",
        "limited",
        "in_use",
        "borrowed",
        "waiting",
        "time_budget",
        "budget_used",
        "budget_left",
        "projected_run_out",
    ]

    def changelist_view(self, request, extra_context=None):
        token = _budget_statuses.set(budget_status())
        try:
            response = super().changelist_view(request, extra_context)
            return response.render() if hasattr(response, "render") else response
        finally:
            _budget_statuses.reset(token)

    def _status(self, policy):
        return (_budget_statuses.get() or {}).get(policy.pk)

    @admin.display(description="in use")
    def in_use(self, policy):
        status = self._status(policy)
        return numbers.gpus(status.gpus_in_use) if status else "-"

    @admin.display(description="borrowed")
    def borrowed(self, policy):
        status = self._status(policy)
        return numbers.gpus(max(status.gpus_in_use - policy.reservation, Decimal(0))) if status else "-"

    def _per_window(self, policy, text):
        """One line per time budget window ("day: 0.500"), or the figure alone with one window."""
        status = self._status(policy)
        if not status or not status.has_budget:
            return "-"
        if len(status.windows) <= 1:
            return text(status)
        return format_html_join(mark_safe("<br>"), "{}: {}", ((w.period, text(w)) for w in status.windows))

    @admin.display(description="time budget (h)", ordering="budget_hours")
    def time_budget(self, policy):
        status = self._status(policy)
        if not status or not status.has_budget:
            return "-"
        return format_html_join(
            mark_safe("<br>"),
            "{} per {}",
            ((numbers.hours(w.budget_hours), w.period) for w in status.windows or (status,)),
        )

    @admin.display(description="used (h)")
    def budget_used(self, policy):
        return self._per_window(policy, lambda status: numbers.hours(status.used_hours))

    @admin.display(description="left (h)")
    def budget_left(self, policy):
        return self._per_window(policy, lambda status: numbers.hours_left(status.left_hours))

    @admin.display(description="projected run-out")
    def projected_run_out(self, policy):
        return self._per_window(policy, lambda status: status.run_out_text())
