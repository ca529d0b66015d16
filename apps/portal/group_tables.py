"""The tables of the pages that decide for groups: a department's teams and quota changes, a
team's members and projects, leadership's cloud spend caps."""

from decimal import Decimal

import django_tables2 as tables
from django.utils.html import format_html

from apps.policies.models import PolicyChange
from apps.policies.rules import fmt
from apps.portal import words
from apps.portal.it_tables import PolicyUseTable
from apps.portal.tables import (
    NUM,
    GpuColumn,
    Grid,
    HoursColumn,
    WhenColumn,
    actions_column,
    cap_status,
    exact_gpus,
    exact_money,
    gpus,
    money,
)


class TeamUseTable(PolicyUseTable):
    """A department's teams; with a department that lends fairly, each team's borrowed GPUs
    against its fair share of them (``apps.tasks.fair_share``)."""

    fair = tables.Column(verbose_name="Fair share", attrs=NUM, orderable=False, empty_values=())

    class Meta(PolicyUseTable.Meta):
        sequence = ("group", "reservation", "limit", "in_use", "borrowed", "fair", "...")

    def render_fair(self, record):
        if record.fair is None:
            return "—"
        text = f"{gpus(record.fair.borrowed)} of fair {gpus(record.fair.share)} borrowed GPUs"
        if not record.fair.above:
            return text
        return format_html('{} <span class="badge over">above its share</span>', text)

    def value_fair(self, record):
        return "" if record.fair is None else exact_gpus(record.fair.share)


class QuotaChangeTable(tables.Table):
    at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="At (UTC)")
    group = tables.Column(
        verbose_name="Group", accessor="policy__group__name", order_by="policy__group__name"
    )
    actor = tables.Column(verbose_name="By", default="—")
    changes = tables.Column(orderable=False)
    via = tables.Column()

    class Meta(Grid):
        model = PolicyChange
        fields = []
        prefix = "changes-"
        empty_text = "No quota changes yet."

    def render_changes(self, value):
        return "; ".join(
            f"{words.policy_field(field)}: {_shown(old, field)} → {_shown(new, field)}"
            for field, (old, new) in value.items()
        )


def _shown(value, field: str = "") -> str:
    if value is None or (value == "" and field == "further_budgets"):
        return "none"
    if value == "":
        return "no period"
    try:
        return fmt(Decimal(value))
    except ArithmeticError:
        return value


class MemberTable(tables.Table):
    user = tables.Column(accessor="membership__user__username", verbose_name="Member")
    name = tables.Column(verbose_name="Name", accessor="membership__user__get_full_name", orderable=False)
    role = tables.Column(verbose_name="Role", accessor="membership__get_role_display", orderable=False)
    gpus_in_use = GpuColumn(verbose_name="GPUs in use")
    gpu_hours = HoursColumn(verbose_name="GPU-hours in the period")
    waiting = tables.Column(attrs=NUM)
    running = tables.Column(verbose_name="Placed or running", attrs=NUM)
    actions = actions_column("portal/_member_actions.html")

    class Meta(Grid):
        prefix = "members-"
        empty_text = "No members yet."


class ProjectTable(tables.Table):
    name = tables.Column(verbose_name="Project", accessor="project__name")
    priority = tables.Column(verbose_name="Priority", accessor="project__priority", attrs=NUM)
    gpu_hours = HoursColumn(verbose_name="GPU-hours in the period")
    waiting = tables.Column(attrs=NUM)
    actions = actions_column("portal/_project_actions.html", "Set priority")

    class Meta(Grid):
        prefix = "projects-"
        empty_text = "No projects in this group."


class CloudCapTable(tables.Table):
    """Leadership's cloud spend caps against this month's cloud spend."""

    scope = tables.Column(verbose_name="Scope")
    group = tables.Column(verbose_name="Group")
    amount = tables.Column(verbose_name="Cap a month", attrs=NUM)
    spent = tables.Column(verbose_name="Spent this month", attrs=NUM)
    share = tables.Column(verbose_name="Spent %", attrs=NUM, empty_values=())
    status = tables.Column(verbose_name="Status", accessor="reached", orderable=False)
    resets_at = WhenColumn(verbose_name="Resets")
    actions = actions_column("portal/_cap_actions.html")

    class Meta(Grid):
        prefix = "caps-"
        empty_text = "No cloud spend cap: cloud pools grow up to their types' maximum."

    def render_amount(self, value, record):
        return money(value, record.currency)

    def value_amount(self, value):
        return exact_money(value)

    def render_spent(self, value, record):
        return money(value, record.currency)

    def value_spent(self, value):
        return exact_money(value)

    def render_share(self, value):
        return "—" if value is None else f"{value * 100:.0f}"

    def render_status(self, record):
        text = cap_status(record)
        return format_html('<span class="badge over">{}</span>', text) if record.reached else text

    def value_status(self, record):
        return cap_status(record)
