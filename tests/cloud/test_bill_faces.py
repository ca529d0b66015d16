"""The cloud bill's faces (issue 37): the API (multipart import, reconciliation, booking), the
portal page, the booking of a closed month's difference as an adjustment (once), the admin, and
who may: finance and IT at the organisation's root; anyone else 403. A bad file is a 400 naming
the field, never a 500."""

from datetime import date
from decimal import Decimal

import pytest
from django.contrib import admin
from django.core.files.uploadedfile import SimpleUploadedFile
from rest_framework.test import APIClient

from apps.accounts.models import User
from apps.cloud import bill_reconcile, bills
from apps.cloud.models import CloudBill, CloudBillBooking, CloudBillLine, CloudPool
from apps.ledger import closing
from apps.ledger.closing import close_month, reopen_month
from apps.ledger.models import Adjustment, MonthClose
from tests.admins import superuser_request
from tests.cloud.bill_files import at, month_rows
from tests.cloud.bill_pool import aws_month  # noqa: F401  (the fixture)
from tests.portal.conftest import estate  # noqa: F401  (the fixture)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("aws_month")]
URL = "/api/v1/cloud/bills/"
NOW = at(2, 9, month=12)


def api(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


def cur_file(kind: str = "parquet", bill=None) -> SimpleUploadedFile:
    name, content = (bill or month_rows()).file(kind)
    return SimpleUploadedFile(name, content, content_type="application/octet-stream")


@pytest.fixture
def frozen(time_machine):
    time_machine.move_to(NOW, tick=False)


@pytest.mark.usefixtures("frozen")
def test_finance_imports_over_the_api_and_reads_the_reconciliation():
    made = api("finance").post(URL, {"file": cur_file("csv.gz"), "month": "2026-11"}, format="multipart")
    assert made.status_code == 201, made.json()
    assert made.json()["rows_kept"] == 13 and made.json()["file_format"] == "csv.gz"
    assert made.json()["imported_by"] == "finance" and made.json()["via"] == "api"
    found = api("it").get(f"{URL}reconciliation/", {"month": "2026-11"})
    assert found.status_code == 200
    [pool] = found.json()["pools"]
    figures = {
        key: pool[key] for key in ("klique", "bill", "difference", "unmatched", "missing", "price", "hours")
    }
    assert figures == {
        "klique": "495.32",
        "bill": "566.87",
        "difference": "71.55",
        "unmatched": "110.08",
        "missing": "-55.04",
        "price": "2.75",
        "hours": "13.76",
    }
    assert found.json()["currency"] == "USD" and found.json()["closed"] is False
    assert api("finance").get(URL).json()["results"][0]["id"] == made.json()["id"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"month": "2026-11"}, "file"),
        ({"file": "x", "month": "2026-11"}, "file"),
        ({"file": SimpleUploadedFile("bill.csv", b"a,b\n1,2\n"), "month": "2026-11"}, "file"),
        ({"file": SimpleUploadedFile("bill.parquet", b"PAR1 broken"), "month": "2026-11"}, "file"),
        ({"file": SimpleUploadedFile("bill.csv.gz", b"\x1f\x8b broken"), "month": "2026-11"}, "file"),
        ({"file": "cur", "month": "2026-13"}, "month"),
        ({"file": "cur", "month": "2026-09"}, "file"),  # no usage of September in it
    ],
)
def test_a_bad_import_is_a_400_naming_the_field_never_a_500(body, field):
    body = {key: cur_file("csv") if value == "cur" else value for key, value in body.items()}
    answer = api("finance").post(URL, body, format="multipart")
    assert answer.status_code == 400 and field in answer.json(), answer.content
    assert not CloudBill.objects.exists()


def test_a_month_without_a_bill_is_a_404_and_a_bad_month_a_400():
    assert api("finance").get(f"{URL}reconciliation/", {"month": "2026-11"}).status_code == 404
    assert "month" in api("finance").get(f"{URL}reconciliation/", {"month": "nov"}).json()


@pytest.mark.parametrize("username", ["cio", "head-language", "lead-pretraining", "dev-pretraining"])
def test_only_finance_and_it_at_the_root_use_the_bill_api(username):
    client = api(username)
    assert client.get(URL).status_code == 403
    assert client.get(f"{URL}reconciliation/", {"month": "2026-11"}).status_code == 403
    assert client.post(URL, {"file": cur_file(), "month": "2026-11"}, format="multipart").status_code == 403
    assert client.post(f"{URL}bookings/", {"month": "2026-11", "pool": "aws-h100"}).status_code == 403


@pytest.mark.usefixtures("frozen")
def test_a_closed_months_difference_is_booked_once_as_an_adjustment():
    finance = api("finance")
    finance.post(URL, {"file": cur_file(), "month": "2026-11"}, format="multipart")
    book = {"month": "2026-11", "pool": "aws-h100"}
    open_month = finance.post(f"{URL}bookings/", book, format="json")
    assert open_month.status_code == 400 and "is not closed" in open_month.json()["month"][0]
    close_month(date(2026, 11, 1))
    booked = finance.post(f"{URL}bookings/", book, format="json")
    assert booked.status_code == 201, booked.json()
    assert (booked.json()["amount"], booked.json()["currency"], booked.json()["actor"]) == (
        "71.55",
        "USD",
        "finance",
    )
    adjustment = Adjustment.objects.get(pk=booked.json()["adjustment"])
    assert (adjustment.closed_month, adjustment.booked_in) == (date(2026, 11, 1), date(2026, 12, 1))
    assert (adjustment.cost, adjustment.currency, adjustment.group.slug) == (Decimal("71.55"), "USD", "acme")
    assert adjustment.cost_units == 7155 * 360_000_000_000 and adjustment.gpu_type.name == "H100"
    assert "Cloud bill of November 2026 for pool aws-h100" in adjustment.reason
    twice = api("it").post(f"{URL}bookings/", book, format="json")
    assert twice.status_code == 400 and "already booked (71.55 USD by finance" in twice.json()["pool"][0]
    unknown = finance.post(f"{URL}bookings/", {**book, "pool": "nowhere"}, format="json")
    assert unknown.json() == {"pool": ["Unknown pool nowhere."]}
    # reopening the month voids the adjustment; closed again, the difference may be booked again
    reopen_month(
        MonthClose.objects.get(month=date(2026, 11, 1), reopened_at__isnull=True), reason="Late bill."
    )
    assert bill_reconcile.reconcile(date(2026, 11, 1)).pools[0].booking is None
    close_month(date(2026, 11, 1))
    assert finance.post(f"{URL}bookings/", book, format="json").status_code == 201
    assert CloudBillBooking.objects.count() == 2


@pytest.mark.usefixtures("frozen")
def test_finance_imports_reads_and_books_on_the_portal_page(client):
    client.force_login(User.objects.get(username="cio"))
    assert 'id="cloud-bill-link"' not in client.get("/finance/").content.decode()  # it would be 403
    client.force_login(User.objects.get(username="finance"))
    assert 'id="cloud-bill-link"' in client.get("/finance/").content.decode()
    imported = client.post("/finance/bills/import/", {"file": cur_file("parquet"), "month": "2026-11"})
    assert imported.status_code == 302 and imported["Location"] == "/finance/bills/?month=2026-11"
    page = client.get(imported["Location"]).content.decode()
    assert 'id="difference-aws-h100">$71.55' in page and 'id="difference-total">$71.55' in page
    assert "$110.08" in page and "-$55.04" in page and "$2.75" in page and "$13.76" in page
    assert "close it to book a difference" in page
    bad = client.post(
        "/finance/bills/import/", {"file": SimpleUploadedFile("x.csv", b"a\n1\n"), "month": "2026-11"}
    )
    assert bad.status_code == 400 and "missing the columns" in bad.content.decode()
    close_month(date(2026, 11, 1))
    pool = CloudBillLine.objects.exclude(node=None).first().node.cloud_pool_id
    booked = client.post("/finance/bills/book/", {"month": "2026-11", "pool": pool})
    assert booked.status_code == 302
    page = client.get(booked["Location"]).content.decode()
    assert "Booked $71.55 by finance" in page
    again = client.post("/finance/bills/book/", {"month": "2026-11", "pool": pool})
    assert again.status_code == 400 and "already booked" in again.content.decode()


@pytest.mark.usefixtures("frozen")
def test_the_late_corrections_sweep_leaves_a_booked_cloud_bill_alone():
    bills.import_bill(cur_file(), date(2026, 11, 1))
    close_month(date(2026, 11, 1))
    bill_reconcile.book(CloudPool.objects.get(pool__name="aws-h100"), date(2026, 11, 1))
    assert closing.sweep() == []


def test_the_bill_admin_is_read_only():
    request = superuser_request()
    for model in (CloudBill, CloudBillLine, CloudBillBooking):
        model_admin = admin.site._registry[model]
        assert model_admin.has_view_permission(request)
        assert not model_admin.has_add_permission(request) and not model_admin.has_change_permission(request)
        assert not model_admin.has_delete_permission(request)
