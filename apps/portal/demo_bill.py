"""Last month's cloud bill of the demo estate, reconciled (``docs/cloud.md``, "Reconciling the cloud
bill"): three nodes of the demo cloud pool that ran last month, and an AWS CUR 2.0 file of their
usage at the demo's on-demand price with one injected difference: the provider bills node 3 half an
hour longer than Klique recorded it. The reconciliation page then shows 340.00 EUR charged, 353.60
EUR billed, a difference of 13.60 EUR, all of it hours. Idempotent: nothing is added once a bill of
that month exists."""

import csv
import io
from datetime import date, datetime, timedelta
from decimal import Decimal

from django.contrib.auth import get_user_model

from apps.cloud import bills, cur
from apps.cloud.caps import month_bounds
from apps.cloud.models import CloudBill, CloudNode, CloudPool

ON_DEMAND = Decimal("27.20")  # apps.portal.demo.NODE_PRICES
# name, instance id, (day, hour, minute) launched, hours Klique recorded, hours billed
NODES = [
    ("cloud-h100-demo-1", "i-0demo0000000001", (3, 10, 0), Decimal(4), Decimal(4)),
    ("cloud-h100-demo-2", "i-0demo0000000002", (8, 9, 0), Decimal("2.5"), Decimal("2.5")),
    ("cloud-h100-demo-3", "i-0demo0000000003", (15, 0, 0), Decimal(6), Decimal("6.5")),
]


def last_month(now: datetime) -> date:
    start, _ = month_bounds(now)
    return (start - timedelta(days=1)).replace(day=1)


def seed_bill(cloud_pool: CloudPool, now: datetime) -> CloudBill | None:
    """The nodes and the imported bill of the month before ``now``; None when it is there already."""
    month = last_month(now)
    if CloudBill.objects.filter(month=month).exists():
        return None
    kind = cloud_pool.instance_types.order_by("pk").first()
    lines = []
    for name, instance_id, (day, hour, minute), recorded, billed in NODES:
        launched = datetime(month.year, month.month, day, hour, minute, tzinfo=now.tzinfo)
        CloudNode.objects.get_or_create(
            instance_id=instance_id,
            defaults={
                "cloud_pool": cloud_pool,
                "instance_type": kind,
                "market": "on-demand",
                "name": name,
                "state": CloudNode.State.TERMINATED,
                "launched_at": launched,
                "terminated_at": launched + timedelta(hours=float(recorded)),
            },
        )
        lines.extend(_hours(instance_id, kind.name, launched, billed))
    upload = io.BytesIO(_csv(lines))
    upload.name = "cur-demo-00001.csv"
    finance = get_user_model().objects.filter(username="finance").first()
    return bills.import_bill(upload, month, actor=finance, via=CloudBill.Via.PORTAL, now=now)


def _hours(instance_id: str, instance_type: str, start: datetime, hours: Decimal) -> list[dict]:
    """One CUR line per hour the instance ran, the last one for what is left of an hour."""
    lines = []
    while hours > 0:
        amount = min(hours, Decimal(1))
        lines.append(
            {
                cur.LINE_TYPE: "Usage",
                cur.PRODUCT: "AmazonEC2",
                cur.RESOURCE: instance_id,
                cur.START: f"{start:%Y-%m-%dT%H:%M:%SZ}",
                cur.END: f"{start + timedelta(hours=1):%Y-%m-%dT%H:%M:%SZ}",
                cur.AMOUNT: str(amount),
                cur.RATE: str(ON_DEMAND),
                cur.COST: str(amount * ON_DEMAND),
                cur.CURRENCY: "EUR",
                cur.INSTANCE_TYPE: instance_type,
                cur.TAGS: "",
            }
        )
        hours -= amount
        start += timedelta(hours=1)
    return lines


def _csv(lines: list[dict]) -> bytes:
    out = io.StringIO()
    writer = csv.DictWriter(out, cur.WANTED, lineterminator="\n")
    writer.writeheader()
    writer.writerows(lines)
    return out.getvalue().encode()
