"""The report table: the report's own columns, sortable, with the total (and the unused capacity)
pinned below the rows. Figures are written as a person reads them (``apps.core.columns``); the
exports take the report's records, at full precision. A report by group lists every level, each
row with its subtree: the group's name is indented by its level, and the ``level`` column (hidden
on the page) goes to the table's CSV."""

import django_tables2 as tables
from django.utils.html import format_html

from apps.core.columns import FigureColumn
from apps.ledger.selectors import Report

MAX_INDENT = 5


class GroupColumn(tables.Column):
    """A group's name, indented by its level under the organisation."""

    def render(self, value, record):
        level = record.get("level")
        if level in ("", None):
            return value
        return format_html('<span class="level level-{}">{}</span>', min(int(level), MAX_INDENT), value)

    def value(self, value):
        return value


def _column(key: str, title: str, kind: str, currency: str) -> tables.Column:
    if kind == "text":
        if key == "group":
            return GroupColumn(verbose_name=title)
        return tables.Column(verbose_name=title, visible=key != "level")
    return FigureColumn(kind, currency, verbose_name=title)


class UsageTable(tables.Table):
    class Meta:
        attrs = {"class": "grid"}
        empty_text = "No usage in this range."
        pinned_row_attrs = {"class": "summary"}

    def __init__(self, report: Report, **kwargs):
        self.report = report
        currency = report.spec.currency
        columns = [(key, _column(key, title, kind, currency)) for key, title, kind in report.columns()]
        super().__init__(report.records(), extra_columns=columns, **kwargs)

    def get_bottom_pinned_data(self):
        return self.report.summary_records()
