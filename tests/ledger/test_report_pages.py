"""The report page, its CSV and XLSX exports and the usage API: the same numbers everywhere,
bad input answered 400 naming the field, and nothing shown that the viewer's role does not allow."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from html.parser import HTMLParser

import pytest
from openpyxl import load_workbook

from apps.ledger import rollups
from apps.pricing import services as pricing
from klique import numbers
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db

APRIL = "period=month&date=2026-04-10"


class Cells(HTMLParser):
    """The text of each row of the page's report table."""

    def __init__(self):
        super().__init__()
        self.rows, self.row, self.cell, self.in_table = [], None, None, False

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.in_table = True
        elif self.in_table and tag == "tr":
            self.row = []
        elif self.row is not None and tag in ("td", "th"):
            self.cell = ""

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            self.row.append(self.cell.strip())
            self.cell = None
        elif tag == "tr" and self.row is not None:
            self.rows.append(self.row)
            self.row = None
        elif tag == "table":
            self.in_table = False

    def handle_data(self, data):
        if self.cell is not None:
            self.cell += data


def page_rows(response) -> list[list[str]]:
    parser = Cells()
    parser.feed(response.content.decode())
    return [["" if cell == "—" else cell for cell in row] for row in parser.rows]


def csv_rows(response) -> list[list[str]]:
    return list(csv.reader(io.StringIO(response.content.decode())))


def xlsx_rows(response) -> list[list[str]]:
    sheet = load_workbook(io.BytesIO(response.content)).active
    return [
        ["" if v is None else (str(Decimal(str(v))) if isinstance(v, float | int) else v) for v in row]
        for row in sheet.iter_rows(values_only=True)
    ]


def same_numbers(a: list[list[str]], b: list[list[str]]) -> bool:
    def norm(cell):
        try:
            return Decimal(cell)
        except ArithmeticError:
            return cell

    return [[norm(c) for c in row] for row in a] == [[norm(c) for c in row] for row in b]


def as_page(rows: list[list[str]]) -> list[list[str]]:
    """An export as the page writes it (klique/numbers.py): hours to one decimal, money with its
    symbol, the ``Level`` column left out (the page indents the names instead)."""
    header = rows[0]

    def shown(title: str, cell: str) -> str:
        if cell == "":
            return ""
        if title in ("GPU-hours", "Budget hours"):
            return numbers.hours(cell)
        if title.endswith("(EUR)"):
            return numbers.money(cell, "EUR")
        if title.endswith("(%)"):
            return f"{numbers.hours(cell)} %"
        return cell

    kept = [i for i, title in enumerate(header) if title != "Level"]
    return [[header[i] for i in kept]] + [[shown(header[i], row[i]) for i in kept] for row in rows[1:]]


@pytest.fixture
def estate():
    estate = make_estate()
    u = estate.users
    day = datetime(2026, 4, 10, tzinfo=UTC)
    record(
        estate,
        estate.team_a,
        u["alice"],
        estate.onprem,
        day,
        day + timedelta(hours=10),
        gpus="2",
        project=estate.project_a,
    )
    record(
        estate,
        estate.team_b,
        u["bob"],
        estate.onprem,
        day,
        day + timedelta(hours=4),
        gpus="0.25",
        weight="0.25",
    )
    record(
        estate, estate.team_c, u["carol"], estate.cloud, day, day + timedelta(hours=3, minutes=20), gpus="1"
    )
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour="2.1", effective_from=date(2026, 1, 1), via="system"
    )
    pricing.create_price(
        gpu_type=estate.h100, per_gpu_hour="3.4", effective_from=date(2026, 1, 1), via="system"
    )
    pricing.create_price(
        gpu_type=estate.h100, per_gpu_hour="3.7", effective_from=date(2026, 4, 10), via="system"
    )
    rollups.refresh(datetime(2026, 5, 2, tzinfo=UTC))
    return estate


def get(client, user, url):
    client.force_login(user)
    return client.get(url)


def test_the_report_page_needs_login(client):
    response = client.get("/reports/")
    assert response.status_code == 302 and "login" in response["Location"]


def test_a_bare_request_is_this_months_report_by_group(client, estate):
    response = get(client, estate.users["fin"], "/reports/")
    assert response.status_code == 200
    assert response.context["report"].spec.dims == ("group",)


@pytest.mark.parametrize(
    "query", ["by=group", "by=user&then_by=gpu_type", "by=pool&idle=separate", "by=group&idle=spread"]
)
def test_csv_and_xlsx_exports_hold_the_same_numbers_as_the_page(client, estate, query):
    url = f"/reports/?{APRIL}&{query}"
    page = page_rows(get(client, estate.users["fin"], url))
    exported_csv = csv_rows(client.get(url + "&export=csv"))
    exported_xlsx = xlsx_rows(client.get(url + "&export=xlsx"))
    assert len(page) >= 3 and page[-1 if "idle" not in query else -3][0] == "Total"
    if "idle" in query:
        assert page[-1][0] == "Capacity in force"
    assert page == as_page(exported_csv)
    assert same_numbers(exported_csv, exported_xlsx)


def test_the_xlsx_export_opens_with_an_about_sheet(client, estate):
    response = get(client, estate.users["fin"], f"/reports/?{APRIL}&export=xlsx")
    assert response["Content-Type"].startswith("application/vnd.openxmlformats")
    workbook = load_workbook(io.BytesIO(response.content))
    assert workbook.sheetnames == ["Usage", "About"]
    assert ("Currency", "EUR") in list(workbook["About"].iter_rows(values_only=True))


def test_the_api_gives_the_page_numbers_as_json_and_csv(client, estate):
    client.force_login(estate.users["fin"])
    url = f"/api/v1/usage/report/?{APRIL}&by=gpu_type"
    data = client.get(url).json()
    page = page_rows(client.get(f"/reports/?{APRIL}&by=gpu_type"))
    figures = [[r["gpu_type"], r["gpu_hours"], r["budget_hours"], r["cost"]] for r in data["rows"]]
    assert as_page([page[0], *figures]) == page[:-1]
    assert data["total"]["gpu_hours"] == "24.333" and data["currency"] == "EUR"
    # H100: 3 h 20 min on the 10th, all at the price from the 10th
    assert next(r for r in data["rows"] if r["gpu_type"] == "H100")["cost"] == "12.33"
    exported = client.get(url + "&format=csv")
    assert exported["Content-Type"].startswith("text/csv")
    assert as_page(csv_rows(exported)) == page


def test_the_api_refuses_an_anonymous_caller_with_401(client):
    assert client.get("/api/v1/usage/report/").status_code == 401


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("period=custom&start=2026-04-01", "end"),
        ("period=custom&start=2026-04-01T10:30&end=2026-04-02", "start"),
        ("period=custom&start=2026-04-02&end=2026-04-01", "end"),
        ("period=custom&start=2020-01-01&end=2026-04-01", "end"),
        ("period=week&start=2026-04-01", "start"),
        ("period=fortnight", "period"),
        ("date=yesterday", "date"),
        ("by=team", "by"),
        ("by=user&then_by=user", "then_by"),
        ("by=user&level=team", "level"),
        ("group=nope", "group"),
        ("gpu_type=TPU", "gpu_type"),
        ("currency=XYZ", "currency"),
        ("idle=all", "idle"),
        ("date=9999-12-31&period=month", "date"),
        ("date=9999-12-31&period=quarter", "date"),
        ("period=custom&start=0001-01-01T00:00%2B01:00&end=2026-04-01", "start"),
        ("period=custom&start=2026-04-01&end=9999-12-31T23:00-05:00", "end"),
    ],
)
def test_bad_parameters_are_a_400_naming_the_field(client, estate, query, field):
    client.force_login(estate.users["fin"])
    response = client.get(f"/api/v1/usage/report/?{query}")
    assert response.status_code == 400 and field in response.json(), response.json()
    assert client.get(f"/reports/?{query}").status_code == 400


def test_an_unknown_export_is_a_400(client, estate):
    assert get(client, estate.users["fin"], "/reports/?export=pdf").status_code == 400


def test_a_custom_range_on_whole_hours_is_reported(client, estate):
    client.force_login(estate.users["fin"])
    query = "by=user&period=custom&start=2026-04-10T02:00:00Z&end=2026-04-10T04:00"
    data = client.get(f"/api/v1/usage/report/?{query}").json()
    hours = {r["user"]: r["gpu_hours"] for r in data["rows"]}
    assert hours == {"alice": "4.000", "bob": "0.500", "carol": "1.333"}


@pytest.mark.parametrize(
    ("user", "query"),
    [
        ("alice", "group=alignment"),
        ("alice", "user=bob"),
        ("lead", "group=language"),
        ("head", "group=vision"),
        ("head", "idle=separate"),
        ("lead", "idle=spread"),
    ],
)
def test_what_a_role_may_not_see_is_a_403_on_the_page_and_the_api(client, estate, user, query):
    client.force_login(estate.users[user])
    assert client.get(f"/reports/?{APRIL}&{query}").status_code == 403
    assert client.get(f"/api/v1/usage/report/?{APRIL}&{query}").status_code == 403
    assert client.get(f"/reports/?{APRIL}&{query}&export=csv").status_code == 403


def test_exports_of_a_member_hold_only_their_own_use(client, estate):
    client.force_login(estate.users["bob"])
    for url in (f"/reports/?{APRIL}&by=user&export=csv", f"/api/v1/usage/report/?{APRIL}&by=user&format=csv"):
        lines = csv_rows(client.get(url))
        assert [line[0] for line in lines] == ["User", "bob", "Total"]
    xlsx = xlsx_rows(client.get(f"/reports/?{APRIL}&by=group&export=xlsx"))
    assert [line[0] for line in xlsx] == ["Group", "Alignment", "Total"]


def test_a_department_head_filters_their_subtree(client, estate):
    client.force_login(estate.users["head"])
    data = client.get(f"/api/v1/usage/report/?{APRIL}&by=group&group=pretraining").json()
    assert [r["group"] for r in data["rows"]] == ["Pretraining"] and data["total"]["gpu_hours"] == "20.000"


def test_the_group_filter_lists_only_the_groups_a_viewer_may_see(client, estate):
    response = get(client, estate.users["lead"], "/reports/")
    choices = {str(g) for g in response.context["form"].fields["group"].queryset}
    assert choices == {"Pretraining"}


def test_the_page_offers_the_previous_and_next_period(client, estate):
    response = get(client, estate.users["fin"], f"/reports/?{APRIL}")
    assert "date=2026-03-31" in response.context["previous"] and "date=2026-05-01" in response.context["next"]


def test_only_the_estate_roles_are_offered_unused_capacity(client, estate):
    assert 'name="idle"' in get(client, estate.users["cio"], "/reports/").content.decode()
    assert 'name="idle"' not in get(client, estate.users["head"], "/reports/").content.decode()
