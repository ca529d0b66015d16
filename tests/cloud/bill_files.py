"""A generator of AWS Cost and Usage Report 2.0 files with known answers: CSV, gzip'd CSV and Parquet
(with CUR 2.0's own types there: timestamps, doubles, a map of resource tags), for the bill
reconciliation tests. ``month_rows`` is one month of a small pool with every kind of difference."""

import csv
import gzip
import io
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq

COLUMNS = [
    "identity_line_item_id",
    "bill_billing_period_start_date",
    "line_item_line_item_type",
    "line_item_product_code",
    "line_item_usage_type",
    "line_item_resource_id",
    "line_item_usage_start_date",
    "line_item_usage_end_date",
    "line_item_usage_amount",
    "line_item_unblended_rate",
    "line_item_unblended_cost",
    "line_item_currency_code",
    "product_instance_type",
    "resource_tags",
]
MONEY = {"line_item_usage_amount", "line_item_unblended_rate", "line_item_unblended_cost"}
NAMES = {"csv": "cur-00001.csv", "csv.gz": "cur-00001.csv.gz", "parquet": "cur-00001.snappy.parquet"}
TIMES = {"bill_billing_period_start_date", "line_item_usage_start_date", "line_item_usage_end_date"}


def at(day: int, hour: int, minute: int = 0, month: int = 11) -> datetime:
    return datetime(2026, month, day, hour, minute, tzinfo=UTC)


@dataclass
class Bill:
    rows: list[dict] = field(default_factory=list)
    currency: str = "USD"

    def row(
        self,
        kind="Usage",
        product="AmazonEC2",
        usage_type="",
        resource="",
        start=None,
        hours="0",
        rate="",
        cost="0",
        instance_type="",
        tags=None,
    ) -> None:
        start = start or at(1, 0)
        self.rows.append(
            {
                "identity_line_item_id": f"line-{len(self.rows) + 1}",
                "bill_billing_period_start_date": at(1, 0),
                "line_item_line_item_type": kind,
                "line_item_product_code": product,
                "line_item_usage_type": usage_type,
                "line_item_resource_id": resource,
                "line_item_usage_start_date": start,
                "line_item_usage_end_date": start + timedelta(hours=1),
                "line_item_usage_amount": Decimal(hours),
                "line_item_unblended_rate": Decimal(rate) if rate else None,
                "line_item_unblended_cost": Decimal(cost),
                "line_item_currency_code": self.currency,
                "product_instance_type": instance_type,
                "resource_tags": tags or {},
            }
        )

    def usage(self, instance: str, start: datetime, hours: str, rate: str, market="on-demand", tags=None):
        """One hour's line of an instance: ``hours`` of it at ``rate`` (cost = hours x rate)."""
        kind = "SpotUsage" if market == "spot" else "BoxUsage"
        cost = Decimal(hours) * Decimal(rate)
        self.row(
            usage_type=f"EUW1-{kind}:p5.48xlarge",
            resource=instance,
            start=start,
            hours=hours,
            rate=rate,
            cost=str(cost),
            instance_type="p5.48xlarge",
            tags=tags,
        )

    def hours(self, instance: str, start: datetime, count: int, rate: str, **kwargs) -> None:
        for hour in range(count):
            self.usage(instance, start + timedelta(hours=hour), "1", rate, **kwargs)

    def csv_bytes(self) -> bytes:
        out = io.StringIO()
        writer = csv.DictWriter(out, COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({name: _text(name, value) for name, value in row.items()})
        return out.getvalue().encode()

    def gzip_bytes(self) -> bytes:
        return gzip.compress(self.csv_bytes())

    def parquet_bytes(self) -> bytes:
        def kind(name):
            if name in TIMES:
                return pa.timestamp("ms")
            if name in MONEY:
                return pa.float64()
            return pa.map_(pa.string(), pa.string()) if name == "resource_tags" else pa.string()

        schema = pa.schema([(name, kind(name)) for name in COLUMNS])
        columns = {name: [_parquet(name, row[name]) for row in self.rows] for name in COLUMNS}
        out = io.BytesIO()
        pq.write_table(pa.table(columns, schema=schema), out)
        return out.getvalue()

    def file(self, kind: str) -> tuple[str, bytes]:
        """(file name, content) as Data Exports names them."""
        write = {"csv": self.csv_bytes, "csv.gz": self.gzip_bytes, "parquet": self.parquet_bytes}[kind]
        return NAMES[kind], write()


def _text(name: str, value) -> str:
    if value is None:
        return ""
    if name in TIMES:
        return value.strftime("%Y-%m-%dT%H:%M:%SZ")
    if name == "resource_tags":
        return json.dumps(value) if value else ""
    return str(value)


def _parquet(name: str, value):
    if name in TIMES:
        return value.replace(tzinfo=None)
    if name in MONEY:
        return None if value is None else float(value)
    return list(value.items()) if name == "resource_tags" else value


# The known month (November 2026, USD). Klique's prices for p5.48xlarge: 55.04 on demand, 22.00 spot.
NODES = [
    # name, instance id, market, launched, terminated
    ("aws-h100-1", "i-0aaa000000000001", "on-demand", at(3, 10), at(3, 14)),
    ("aws-h100-2", "i-0aaa000000000002", "spot", at(5, 8), at(5, 10, 30)),
    ("aws-h100-3", "i-0aaa000000000003", "on-demand", at(10, 0), at(10, 3)),
    ("aws-h100-4", "i-0aaa000000000004", "on-demand", at(12, 12), at(12, 13)),
]
UNKNOWN = "i-0fff00000000dead"


def month_rows() -> Bill:
    """Node 1 as Klique has it; node 2 at another spot rate (23.10, not 22.00); node 3 a quarter
    of an hour longer than Klique recorded; node 4 missing; one instance Klique does not know,
    tagged with the pool; and rows that are not instance usage of the month."""
    bill = Bill()
    bill.hours("i-0aaa000000000001", at(3, 10), 4, "55.04")
    bill.hours("i-0aaa000000000002", at(5, 8), 2, "23.10", market="spot")
    bill.usage("i-0aaa000000000002", at(5, 10), "0.5", "23.10", market="spot")
    bill.hours("i-0aaa000000000003", at(10, 0), 3, "55.04")
    bill.usage("i-0aaa000000000003", at(10, 3), "0.25", "55.04")
    bill.hours(UNKNOWN, at(15, 6), 2, "55.04", tags={"user_klique_pool": "aws-h100"})
    bill.row(kind="Tax", cost="41.20")
    bill.row(kind="Credit", cost="-10.00")
    bill.row(usage_type="EUW1-EBS:VolumeUsage.gp3", resource="vol-0abc", hours="0.5", cost="0.04")
    bill.row(usage_type="EUW1-DataTransfer-Out-Bytes", resource="i-0aaa000000000001", hours="12", cost="1.08")
    bill.row(product="AmazonS3", usage_type="EUW1-TimedStorage-ByteHrs", resource="klique-logs", cost="0.50")
    bill.usage("i-0aaa000000000001", at(31, 23, month=10), "1", "55.04")
    return bill
