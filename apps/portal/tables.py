"""What the portal's tables (django-tables2) share: figures as a person reads them (``klique.numbers``
owns the rules), times, a task's size, a profile's badges, a notification's message, the figure
columns (exported at full precision), the grid's look and the ``actions`` columns of forms, which
are left out of the exports. The tables themselves sit by page: ``work_tables`` (a developer's
work), ``it_tables`` (IT's estate), ``group_tables`` (a department, a team, leadership's caps).

Each table has a ``prefix`` so that several can sit on one page."""

import django_tables2 as tables
from django.template.loader import get_template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from apps.accounts.models import Notification
from apps.tasks.models import Task
from klique import numbers

NUM = {"td": {"class": "num"}, "th": {"class": "num"}}

# Figures as a person reads them: klique/numbers.py owns the rules.
gpus = numbers.gpus
hours = numbers.hours
hours_left = numbers.hours_left
money = numbers.money
exact_gpus, exact_hours, exact_money = numbers.exact_gpus, numbers.exact_hours, numbers.exact_money


def task_gpus(task: Task) -> str:
    """A task's size: its GPUs, or on several nodes its nodes times its GPUs per node ("2 x 4")."""
    return f"{task.nodes} x {gpus(task.gpus)}" if task.nodes > 1 else gpus(task.gpus)


def when(value) -> str:
    return f"{value:%Y-%m-%d %H:%M} UTC" if value else "—"


def run_out(status) -> str:
    """When a time budget runs out at the current burn rate. A run-out at or after the period's
    reset is no run-out: the budget lasts the period, and the reset is shown instead."""
    return when(status.projected_run_out) if status.runs_out_in_period else status.run_out_text()


def cap_status(status) -> str:
    """A cloud spend cap in words: reached (no new cloud node for its scope until the reset) or not."""
    if status.reached:
        return f"cap reached until {when(status.resets_at)}"
    if status.unpriced_node_hours:
        unpriced = f"{hours(status.unpriced_node_hours)} node-hours without a price in {status.currency}"
        return f"within cap ({unpriced} not counted)"
    return "within cap"


class GpuColumn(tables.Column):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, attrs=NUM, **kwargs)

    def render(self, value):
        return gpus(value)

    def value(self, value):
        return exact_gpus(value)


class HoursColumn(tables.Column):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, attrs=NUM, **kwargs)

    def render(self, value):
        return hours(value)

    def value(self, value):
        return exact_hours(value)


class WindowsColumn(tables.Column):
    """A time budget figure of the row's policy, one line per window (``record.status.windows``);
    in exports the lines are joined with "; ", at full precision when ``exported`` is given."""

    def __init__(self, text, *args, number: bool = True, exported=None, **kwargs):
        self.text, self.exported = text, exported or text
        super().__init__(*args, attrs=NUM if number else {}, empty_values=(), **kwargs)

    def lines(self, record, text=None) -> list[str]:
        return [(text or self.text)(w) for w in (record.status.windows or (record.status,))]

    def render(self, record):
        return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in self.lines(record)))

    def value(self, record):
        return "; ".join(self.lines(record, self.exported))


class WhenColumn(tables.Column):
    def render(self, value):
        return when(value)


class Grid:
    attrs = {"class": "grid"}


class PageContextColumn(tables.TemplateColumn):
    """A template column drawn in the page's context (its CSRF token, the person): rendered with
    the request instead, as ``TemplateColumn`` does, every context processor (the navigation, the
    unread count) would run again for each row."""

    def render(self, record, table, value, bound_column, **kwargs):
        page = getattr(table, "context", None)
        if page is None or self.template_code:
            return super().render(record, table, value, bound_column, **kwargs)
        row = self.get_context_data(
            record=record, table=table, value=value, bound_column=bound_column, **kwargs
        )
        with page.update(row):
            return get_template(self.template_name).render(page.flatten())


def actions_column(template: str, verbose_name: str = "") -> tables.TemplateColumn:
    """A column of forms (cancel, remove, set): never sorted, never exported."""
    return PageContextColumn(
        template_name=template, verbose_name=verbose_name, orderable=False, exclude_from_export=True
    )


def profile_label(profile) -> str:
    """The profile's name with a badge per constraint on its pools ("sovereign: DE", a minimum GPU
    memory or generation)."""
    badge = '<span class="badge constraint">{}</span>'
    badges = format_html_join(" ", badge, ((label,) for label in profile.constraints))
    return format_html("{} {}", profile.name, badges) if profile.constraints else profile.name


def safe_link(link: str) -> str:
    """A notification's link when it is a path on this site, else ''."""
    return link if link.startswith("/") and not link.startswith(("//", "/\\")) else ""


def notification_message(notification: Notification) -> str:
    link = safe_link(notification.link or "")
    if not link:
        return notification.message
    return format_html('<a href="{}">{}</a>', link, notification.message)
