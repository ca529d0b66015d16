"""The report table: the report's own columns, sortable, with the total (and the unused capacity)
pinned below the rows."""

import django_tables2 as tables

from apps.ledger.selectors import Report

NUMBER_ATTRS = {"td": {"class": "num"}, "th": {"class": "num"}}


class UsageTable(tables.Table):
    class Meta:
        attrs = {"class": "grid"}
        empty_text = "No usage in this range."
        pinned_row_attrs = {"class": "summary"}

    def __init__(self, report: Report, **kwargs):
        self.report = report
        columns = [
            (key, tables.Column(verbose_name=title, attrs=NUMBER_ATTRS if kind != "text" else {}))
            for key, title, kind in report.columns()
        ]
        super().__init__(report.records(), extra_columns=columns, **kwargs)

    def get_bottom_pinned_data(self):
        return self.report.summary_records()
