"""Finance's month close page: close, reopen with a reason, look for late corrections; bad input is
a 400 naming the field; the admin shows closes read-only."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from apps.ledger import closing
from apps.ledger.models import Adjustment, MonthClose
from apps.pricing import services as pricing
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db


@pytest.fixture
def estate():
    estate = make_estate()
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour=Decimal("2.00"), effective_from=date(2026, 1, 1), via="system"
    )
    day = datetime(2026, 4, 10, tzinfo=UTC)
    record(estate, estate.team_a, estate.users["alice"], estate.onprem, day, day + timedelta(hours=2))
    return estate


def test_finance_closes_and_reopens_a_month_from_the_page(client, estate):
    client.force_login(estate.users["fin"])
    response = client.post("/finance/months/close/", {"month": "2026-04"})
    assert response.status_code == 302 and response["Location"] == "/finance/months/"
    close = MonthClose.objects.get(month=date(2026, 4, 1))
    assert close.closed_by == estate.users["fin"] and close.frozen.count() == 1
    page = client.get("/finance/months/").content.decode()
    assert "April 2026 is closed" in page and "by fin" in page and "Reopen" in page

    refused = client.post(f"/finance/months/{close.pk}/reopen/", {"reason": "  "})
    assert refused.status_code == 400 and "Say why the month is reopened." in refused.content.decode()
    assert (
        client.post(f"/finance/months/{close.pk}/reopen/", {"reason": "Late price list"}).status_code == 302
    )
    close.refresh_from_db()
    assert close.reopened_by == estate.users["fin"] and close.reopen_reason == "Late price list"
    assert "Late price list" in client.get("/finance/months/").content.decode()


@pytest.mark.parametrize(
    ("month", "message"),
    [
        ("", "month: give the month to close as YYYY-MM."),
        ("2026-13", "month: Give the month as YYYY-MM, not &#x27;2026-13&#x27;."),
        ("2999-01", "month: That month has not begun."),
    ],
)
def test_a_bad_month_is_a_400_naming_the_field(client, estate, month, message):
    client.force_login(estate.users["it"])
    response = client.post("/finance/months/close/", {"month": month})
    assert response.status_code == 400 and message in response.content.decode()
    assert not MonthClose.objects.exists()


def test_closing_a_month_that_has_not_ended_or_twice_is_a_400(client, estate):
    client.force_login(estate.users["fin"])
    this_month = datetime.now(UTC).strftime("%Y-%m")
    response = client.post("/finance/months/close/", {"month": this_month})
    assert response.status_code == 400 and "has not ended yet" in response.content.decode()
    client.post("/finance/months/close/", {"month": "2026-04"})
    again = client.post("/finance/months/close/", {"month": "2026-04"})
    assert again.status_code == 400 and "April 2026 is already closed." in again.content.decode()


def test_the_sweep_books_a_late_correction(client, estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin)
    day = datetime(2026, 4, 12, tzinfo=UTC)
    record(estate, estate.team_b, estate.users["bob"], estate.onprem, day, day + timedelta(hours=1))
    client.force_login(fin)
    assert client.post("/finance/months/sweep/").status_code == 302
    adjustment = Adjustment.objects.get()
    assert (
        adjustment.group == estate.team_b and adjustment.cost == Decimal("2.00") and adjustment.actor == fin
    )
    assert closing.LATE_CORRECTION in client.get("/finance/months/").content.decode()


def test_leadership_sees_the_page_without_the_actions(client, estate):
    client.force_login(estate.users["cio"])
    page = client.get("/finance/months/").content.decode()
    assert "April 2026" in page and "<form" not in page.split("<h1>")[1]
    assert client.post("/finance/months/close/", {"month": "2026-04"}).status_code == 403


def test_the_admin_shows_closes_read_only(client, estate):
    closing.close_month(date(2026, 4, 1), actor=estate.users["fin"])
    admin = estate.users["it"]
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    close = MonthClose.objects.get()
    assert client.get("/admin/ledger/monthclose/").status_code == 200
    page = client.get(f"/admin/ledger/monthclose/{close.pk}/change/")
    assert page.status_code == 200 and 'name="_save"' not in page.content.decode()
    assert client.get("/admin/ledger/monthclose/add/").status_code == 403
    assert client.get("/admin/ledger/adjustment/").status_code == 200
