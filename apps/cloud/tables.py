"""Finance's cloud spend tables: node-hours and cost per pool, instance type and market, and the
part each group's usage pays, with the idle, spare and total lines pinned below."""

import django_tables2 as tables

from apps.cloud import selectors
from apps.cloud.costs import CloudSpend
from apps.core.columns import FigureColumn


def _columns(columns, currency: str) -> list[tuple[str, tables.Column]]:
    """Text as it is; figures written for reading on the page (``FigureColumn``), exported whole."""
    return [
        (
            key,
            tables.Column(verbose_name=title, default="")
            if kind == "text"
            else FigureColumn(
                kind, currency, verbose_name=f"{title} ({currency})" if kind == "money" else title, default=""
            ),
        )
        for key, title, kind in columns
    ]


class CloudSpendTable(tables.Table):
    """Cloud node-hours and cost per pool, instance type and market, the total pinned below."""

    class Meta:
        attrs = {"class": "grid"}
        empty_text = "No cloud node ran in this range."
        pinned_row_attrs = {"class": "summary"}

    def __init__(self, spend: CloudSpend, **kwargs):
        self.spend = spend
        columns = _columns(selectors.CLOUD_COLUMNS, spend.currency)
        super().__init__(selectors.cloud_records(spend), extra_columns=columns, **kwargs)

    def get_bottom_pinned_data(self):
        return [selectors.cloud_total_record(self.spend)]


class CloudGroupTable(tables.Table):
    """The part of cloud spend each group's usage pays; the idle, spare and total lines below."""

    class Meta:
        attrs = {"class": "grid"}
        empty_text = "No usage ran on cloud nodes in this range."
        pinned_row_attrs = {"class": "summary"}

    def __init__(self, spend: CloudSpend, **kwargs):
        self.spend = spend
        columns = _columns(selectors.CLOUD_GROUP_COLUMNS, spend.currency)
        super().__init__(selectors.cloud_group_records(spend), extra_columns=columns, **kwargs)

    def get_bottom_pinned_data(self):
        return selectors.cloud_part_records(self.spend)
