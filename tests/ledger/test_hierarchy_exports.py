"""A report by group lists every level, each row with its subtree: the page indents the levels,
the exports carry a ``level`` column, and the leaves-only cut (each group's own usage) adds up to
the organisation's total, so no total can be counted twice."""

from decimal import Decimal

import pytest

from tests.ledger import test_report_pages as pages
from tests.ledger.test_report_pages import APRIL, csv_rows, get

estate = pages.estate  # the report pages' estate: three teams' usage in April 2026

pytestmark = pytest.mark.django_db


def by_name(rows: list[list[str]]) -> dict[str, dict[str, str]]:
    header = rows[0]
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows[1:]}


def test_the_export_has_a_level_column_from_the_organisation_down(client, estate):
    rows = by_name(csv_rows(get(client, estate.users["fin"], f"/reports/?{APRIL}&export=csv")))
    levels = {name: row["Level"] for name, row in rows.items() if name != "Total"}
    assert levels == {
        "Acme": "0",
        "Research": "1",
        "Language": "2",
        "Pretraining": "3",
        "Alignment": "3",
        "Vision": "2",
        "Perception": "3",
    }
    assert rows["Total"]["Level"] == ""


def test_the_leaves_only_export_adds_up_to_the_organisation_total(client, estate):
    fin = estate.users["fin"]
    every = by_name(csv_rows(get(client, fin, f"/reports/?{APRIL}&export=csv")))
    leaves = csv_rows(get(client, fin, f"/reports/?{APRIL}&rows=leaves&export=csv"))
    header, rows, total = leaves[0], leaves[1:-1], dict(zip(leaves[0], leaves[-1], strict=True))
    assert total["Group"] == "Total"
    assert {row[0] for row in rows} == {"Pretraining", "Alignment", "Perception"}
    for column in ("GPU-hours", "Budget hours", "Cost (EUR)"):
        at = header.index(column)
        leaves_sum = sum(Decimal(row[at]) for row in rows)
        assert leaves_sum == Decimal(total[column]) == Decimal(every["Acme"][column])
        assert Decimal(every["Total"][column]) == Decimal(every["Acme"][column])
        every_level_sum = sum(Decimal(row[column]) for name, row in every.items() if name != "Total")
        assert every_level_sum > Decimal(total[column])  # the subtree rows overlap: no total


def test_the_page_indents_each_level_and_offers_the_leaves_only_exports(client, estate):
    page = get(client, estate.users["fin"], f"/reports/?{APRIL}").content.decode()
    assert '<span class="level level-0">Acme</span>' in page
    assert '<span class="level level-3">Pretraining</span>' in page
    assert "rows=leaves" in page and "a sum over the rows is no total" in page


def test_leaves_only_needs_a_report_by_group(client, estate):
    response = get(client, estate.users["fin"], f"/reports/?{APRIL}&by=pool&rows=leaves")
    assert response.status_code == 400
    assert "Leaves only applies only to a report by group." in response.content.decode()
