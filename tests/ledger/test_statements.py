"""Monthly statements (PDF read back with pypdf, CSV), cost centres and the per-cost-centre cut,
and who may download what."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone
from pypdf import PdfReader

from apps.accounts.selectors import cost_centres
from apps.ledger import closing
from apps.ledger.cost_centres import COLUMNS
from apps.pricing import services as pricing
from apps.pricing.models import Price
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db


@pytest.fixture
def estate():
    estate = make_estate()
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour=Decimal("2.00"), effective_from=date(2026, 1, 1), via="system"
    )
    pricing.create_price(
        gpu_type=estate.h100, per_gpu_hour=Decimal("4.50"), effective_from=date(2026, 1, 1), via="system"
    )
    day = datetime(2026, 4, 10, tzinfo=UTC)
    u = estate.users
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
        estate, estate.team_a, u["lead"], estate.cloud, day, day + timedelta(hours=1), gpus="8", weight="2"
    )
    record(estate, estate.team_b, u["bob"], estate.onprem, day, day + timedelta(hours=4))
    record(estate, estate.team_c, u["carol"], estate.onprem, day, day + timedelta(hours=3))
    estate.bu.cost_centre = "CC-RES"
    estate.bu.save()
    estate.team_b.cost_centre = "CC-ALIGN"
    estate.team_b.save()
    return estate


def pdf_text(content: bytes) -> str:
    return "\n".join(page.extract_text() for page in PdfReader(io.BytesIO(content)).pages)


def test_cost_centres_are_inherited_from_the_nearest_ancestor_that_has_one(estate):
    centres = cost_centres()
    assert centres[estate.org.pk] == ""
    assert centres[estate.bu.pk] == centres[estate.dept.pk] == centres[estate.team_a.pk] == "CC-RES"
    assert centres[estate.team_b.pk] == "CC-ALIGN"


def test_the_statement_pdf_holds_the_figures_the_adjustments_the_period_and_the_prices(client, estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=datetime(2026, 5, 2, tzinfo=UTC))
    pricing.update_price(
        Price.objects.get(gpu_type=estate.a100), per_gpu_hour=Decimal("3.00"), actor=fin, via="portal"
    )
    client.force_login(fin)

    april = client.get("/reports/statements/?group=language&month=2026-04&format=pdf")
    assert april.status_code == 200 and april["Content-Type"] == "application/pdf"
    assert 'filename="statement-language-2026-04-EUR.pdf"' in april["Content-Disposition"]
    text = pdf_text(april.content)
    for expected in (
        "Statement: Language, April 2026",
        "Acme / Research / Language",
        "CC-RES",
        "2026-04-01 00:00 to 2026-05-01 00:00 UTC",
        "Closed on",
        "by fin",
        "llm-7b",
        "A100-80GB",
        "H100",
        "(no project)",
        "Price list used",
        "Total",
    ):
        assert expected in text, expected
    # Frozen at 2.00: llm-7b 20 GPU-hours = 40.00; Language in all: 40 + 36 (H100) + 8 = 84.00.
    assert "€40.00" in text and "€84.00" in text

    may = " ".join(
        pdf_text(client.get("/reports/statements/?group=language&month=2026-05&format=pdf").content).split()
    )
    assert "Adjustments to closed months booked in this month" in may
    # Language's share of April re-priced at 3.00: Pretraining 20.00 and Alignment 4.00.
    assert "2026-04 Pretraining llm-7b A100-80GB" in may and "Price of A100-80GB in EUR changed" in may
    assert "by fin" not in may and "Adjustments to closed months 0 0 €24.00" in may


def test_the_statement_csv_has_its_header_block_lines_and_totals(client, estate):
    client.force_login(estate.users["fin"])
    response = client.get("/reports/statements/?group=pretraining&month=2026-04&format=csv")
    assert response.status_code == 200
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    header = dict(row for row in rows if len(row) == 2)
    assert header["Statement"] == "Pretraining" and header["Cost centre"] == "CC-RES"
    assert header["Period from (UTC)"] == "2026-04-01 00:00" and header["Currency"] == "EUR"
    assert "A100-80GB 2.0000 from 2026-04-01 until 2026-05-01" in header["Price list used"]
    table = rows[rows.index(["GPU type", "Project", "GPU-hours", "Budget hours", "Cost (EUR)"]) :]
    assert ["A100-80GB", "Pretraining / llm-7b", "20.000", "10.000", "40.00"] in table
    assert ["H100", "(no project)", "8.000", "2.000", "36.00"] in table
    assert ["Total", "", "28.000", "12.000", "76.00"] in table


def test_the_statement_with_idle_spread_adds_the_unused_capacity_columns(client, estate):
    client.force_login(estate.users["cio"])
    response = client.get("/reports/statements/?group=research&month=2026-04&format=csv&idle=spread")
    assert response.status_code == 200
    assert "Unused capacity share (EUR)" in response.content.decode()


def test_who_may_download_a_statement_is_the_reports_rule(client, estate):
    client.force_login(estate.users["lead"])
    assert client.get("/reports/statements/?group=pretraining&month=2026-04&format=pdf").status_code == 200
    assert client.get("/reports/statements/?group=alignment&month=2026-04&format=pdf").status_code == 403
    assert client.get("/reports/statements/?group=language&month=2026-04&format=csv").status_code == 403
    client.force_login(estate.users["head"])
    assert client.get("/reports/statements/?group=alignment&month=2026-04&format=csv").status_code == 200
    assert client.get("/reports/statements/?group=perception&month=2026-04&format=csv").status_code == 403
    assert client.get("/reports/statements/?group=language&idle=spread&format=csv").status_code == 403


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("group=language&month=2026-13&format=pdf", "month"),
        ("group=language&month=april&format=csv", "month"),
        ("group=language&month=2999-01&format=csv", "month"),
        ("group=nowhere&month=2026-04&format=csv", "group"),
        ("group=acme&month=2026-04&format=csv", "group"),
        ("month=2026-04&format=csv", "group"),
        ("group=language&month=2026-04&format=doc", "format"),
        ("group=language&currency=XXX&format=csv", "currency"),
    ],
)
def test_a_bad_statement_request_is_a_400_naming_the_field(client, estate, query, field):
    client.force_login(estate.users["fin"])
    response = client.get(f"/reports/statements/?{query}")
    assert response.status_code == 400
    assert response.content.decode().startswith(f"{field}:")


def test_the_statements_page_offers_the_viewers_groups(client, estate):
    client.force_login(estate.users["lead"])
    page = client.get("/reports/statements/").content.decode()
    assert 'value="pretraining"' in page and 'value="perception"' not in page


def test_the_cost_centre_cut_has_stable_columns_and_counts_each_group_once(client, estate):
    fin = estate.users["fin"]
    client.force_login(fin)
    response = client.get("/reports/cost-centres/?month=2026-04")
    assert response.status_code == 200
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert list(rows[0]) == COLUMNS
    got = {(r["cost_centre"], r["gpu_type"], r["line"]): (r["gpu_hours"], r["amount"]) for r in rows}
    # Vision's Perception has no cost centre of its own and inherits Research's.
    assert got == {
        ("CC-ALIGN", "A100-80GB", "usage"): ("4.000", "8.00"),
        ("CC-RES", "A100-80GB", "usage"): ("23.000", "46.00"),
        ("CC-RES", "H100", "usage"): ("8.000", "36.00"),
    }
    assert {r["month_state"] for r in rows} == {"open"}


def test_the_cost_centre_cut_books_adjustments_as_lines_of_their_own(client, estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=datetime(2026, 5, 2, tzinfo=UTC))
    pricing.update_price(
        Price.objects.get(gpu_type=estate.a100), per_gpu_hour=Decimal("1.00"), actor=fin, via="portal"
    )
    client.force_login(fin)
    april = list(
        csv.DictReader(io.StringIO(client.get("/reports/cost-centres/?month=2026-04").content.decode()))
    )
    assert {r["month_state"] for r in april} == {"closed"}
    may = list(
        csv.DictReader(io.StringIO(client.get("/reports/cost-centres/?month=2026-05").content.decode()))
    )
    adjustments = {(r["cost_centre"], r["line"]): r["amount"] for r in may}
    assert adjustments == {("CC-ALIGN", "adjustment"): "-4.00", ("CC-RES", "adjustment"): "-23.00"}


def test_the_report_export_carries_the_cost_centre(client, estate):
    client.force_login(estate.users["fin"])
    response = client.get("/reports/?by=group&period=month&date=2026-04-01&export=csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    centres = {r["Group"]: r["Cost centre"] for r in rows if r["Group"] != "Total"}
    assert {name: centres[name] for name in ("Acme", "Research", "Alignment", "Perception")} == {
        "Acme": "",
        "Research": "CC-RES",
        "Alignment": "CC-ALIGN",
        "Perception": "CC-RES",
    }


def test_a_statement_of_a_month_that_has_not_begun_is_refused(client, estate):
    client.force_login(estate.users["fin"])
    today = timezone.now().date()
    coming = (today.replace(day=28) + timedelta(days=5)).strftime("%Y-%m")
    response = client.get(f"/reports/statements/?group=language&month={coming}&format=csv")
    assert response.status_code == 400
    assert response.content.decode() == "month: That month has not begun."
