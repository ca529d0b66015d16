"""The cloud bill reconciled (issue 37): generated CUR 2.0 files with known answers, read as CSV,
gzip'd CSV and Parquet, matched to Klique's nodes by instance id, and the difference per pool split
into unknown instances, missing nodes, price and hours, exactly to the cent."""

import io
from datetime import date
from decimal import Decimal
from fractions import Fraction

import pytest
from django.core.exceptions import ValidationError

from apps.cloud import bill_reconcile, bills
from apps.cloud.models import CloudBillLine
from tests.cloud.bill_files import UNKNOWN, Bill, at, month_rows
from tests.cloud.bill_pool import aws_month  # noqa: F401  (the fixture)
from tests.portal.conftest import estate  # noqa: F401  (the fixture)

pytestmark = pytest.mark.django_db
NOVEMBER = date(2026, 11, 1)
NOW = at(1, 0, month=12)


def upload(bill: Bill, kind: str) -> io.BytesIO:
    name, content = bill.file(kind)
    stream = io.BytesIO(content)
    stream.name = name
    return stream


@pytest.mark.parametrize("kind", ["csv", "csv.gz", "parquet"])
@pytest.mark.usefixtures("aws_month")
def test_an_import_keeps_only_ec2_instance_usage_of_the_month_and_counts_the_rest(kind):
    bill = bills.import_bill(upload(month_rows(), kind), NOVEMBER, now=NOW)
    assert (bill.file_format, bill.currency, bill.month) == (kind, "USD", NOVEMBER)
    # 13 usage lines of instances; tax, credit, a volume, data transfer, S3; one line of October
    assert (bill.rows_read, bill.rows_kept, bill.rows_other, bill.rows_outside) == (19, 13, 5, 1)
    assert bill.lines_matched == 11  # the unknown instance's 2 lines match no node
    line = CloudBillLine.objects.get(bill=bill, instance_id="i-0aaa000000000003", usage_start=at(10, 3))
    assert (line.hours, line.cost, line.rate) == (Decimal("0.25"), Decimal("13.76"), Decimal("55.04"))
    assert line.node.name == "aws-h100-3" and line.instance_type == "p5.48xlarge"
    assert (
        CloudBillLine.objects.get(bill=bill, instance_id=UNKNOWN, usage_start=at(15, 6)).tagged_pool
        == "aws-h100"
    )


@pytest.mark.parametrize("kind", ["csv", "csv.gz", "parquet"])
@pytest.mark.usefixtures("aws_month")
def test_the_difference_is_split_into_unknown_instances_missing_nodes_price_and_hours(kind):
    bills.import_bill(upload(month_rows(), kind), NOVEMBER, now=NOW)
    found = bill_reconcile.reconcile(NOVEMBER, now=NOW)
    [pool] = found.pools
    assert pool.pool == "aws-h100" and found.currency == "USD" and not found.closed
    # Klique: 4 h x 55.04 + 2.5 h x 22.00 + 3 h x 55.04 + 1 h x 55.04 = 220.16 + 55.00 + 165.12 + 55.04
    assert pool.klique == Decimal("495.32")
    # the bill: 220.16 + 2.5 h x 23.10 + 3.25 h x 55.04 + the unknown 2 h x 55.04
    assert pool.bill == Decimal("566.87")
    assert pool.difference == Decimal("71.55")
    assert pool.unmatched == Decimal("110.08")  # the unknown instance, tagged with the pool
    assert pool.missing == Decimal("-55.04")  # aws-h100-4 is not on the bill
    assert pool.price == Decimal("2.75")  # 2.5 h x (23.10 - 22.00)
    assert pool.hours == Decimal("13.76")  # 0.25 h x 55.04
    assert pool.unmatched + pool.missing + pool.price + pool.hours == pool.difference
    rows = {i.instance_id: i for i in pool.instances}
    assert [rows[UNKNOWN].cause, rows["i-0aaa000000000004"].cause] == ["unmatched", "missing"]
    assert (rows["i-0aaa000000000002"].klique_rate, rows["i-0aaa000000000002"].bill_rate) == (
        Decimal("22.00"),
        Decimal("23.10"),
    )
    assert (rows["i-0aaa000000000003"].klique_hours, rows["i-0aaa000000000003"].bill_hours) == (
        Decimal("3.000"),
        Decimal("3.25"),
    )
    assert rows["i-0aaa000000000001"].difference == 0


@pytest.mark.usefixtures("aws_month")
def test_an_instance_without_a_pool_tag_is_on_a_line_of_its_own():
    bill = month_rows()
    bill.hours("i-0bbb00000000beef", at(20, 0), 1, "3.10")
    bills.import_bill(upload(bill, "csv"), NOVEMBER, now=NOW)
    found = bill_reconcile.reconcile(NOVEMBER, now=NOW)
    assert [(p.pool, p.bill, p.unmatched) for p in found.pools][1] == ("", Decimal("3.10"), Decimal("3.10"))
    assert found.total("difference") == Decimal("74.65")


@pytest.mark.usefixtures("aws_month")
def test_the_latest_import_of_a_month_is_the_one_reconciled():
    bills.import_bill(upload(month_rows(), "csv"), NOVEMBER, now=NOW)
    exact = month_rows()
    exact.rows = [row for row in exact.rows if row["line_item_resource_id"] != UNKNOWN]
    bills.import_bill(upload(exact, "parquet"), NOVEMBER, now=at(2, 0, month=12))
    [pool] = bill_reconcile.reconcile(NOVEMBER, now=NOW).pools
    assert (pool.bill, pool.unmatched) == (Decimal("456.79"), Decimal("0.00"))


def test_the_causes_add_up_to_the_difference_shown_to_the_cent():
    third = Fraction(1, 3)
    parts = {"unmatched": third, "missing": Fraction(0), "price": third, "hours": third}
    assert bill_reconcile.split(parts, Decimal("1.00")) == {
        "unmatched": Decimal("0.34"),
        "missing": Decimal("0.00"),
        "price": Decimal("0.33"),
        "hours": Decimal("0.33"),
    }
    assert bill_reconcile.split(parts, Decimal("0.99")) == {
        "unmatched": Decimal("0.33"),
        "missing": Decimal("0.00"),
        "price": Decimal("0.33"),
        "hours": Decimal("0.33"),
    }


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda content: b"not,a,cur\n1,2,3\n", "missing the columns line_item_resource_id"),
        (lambda content: content[:40], "not a readable parquet file"),
        (lambda content: b"\x1f\x8b" + b"\x00" * 30, "not a readable csv.gz file"),
    ],
)
@pytest.mark.usefixtures("aws_month")
def test_a_file_klique_cannot_read_is_refused_on_the_file_field(change, reason):
    _, content = month_rows().file("parquet")
    stream = io.BytesIO(change(content))
    stream.name = "bill"
    with pytest.raises(ValidationError) as error:
        bills.import_bill(stream, NOVEMBER, now=NOW)
    assert reason in error.value.message_dict["file"][0]


@pytest.mark.usefixtures("aws_month")
def test_a_file_without_usage_of_the_month_or_in_two_currencies_is_refused():
    with pytest.raises(ValidationError, match="No EC2 instance usage of December 2026"):
        bills.import_bill(upload(month_rows(), "csv"), date(2026, 12, 1), now=NOW)
    mixed = month_rows()
    mixed.currency = "EUR"
    mixed.hours("i-0aaa000000000001", at(3, 10), 1, "50")
    mixed.rows = month_rows().rows + mixed.rows[-1:]
    with pytest.raises(ValidationError, match="more than one currency: EUR, USD"):
        bills.import_bill(upload(mixed, "csv"), NOVEMBER, now=NOW)


@pytest.mark.usefixtures("aws_month")
def test_a_bad_amount_names_its_row_and_column():
    bill = month_rows()
    bill.rows[2]["line_item_unblended_cost"] = "twelve"
    with pytest.raises(ValidationError, match="row 3: line_item_unblended_cost 'twelve' is not a number"):
        bills.import_bill(upload(bill, "csv"), NOVEMBER, now=NOW)
