"""Importing a month's cloud bill: an AWS Cost and Usage Report 2.0 file read by ``apps.cloud.cur``;
its EC2 instance usage lines of the month are stored with the Klique node of their instance id
(``docs/cloud.md``, "Reconciling the cloud bill"). Finance and IT at the organisation's root
import bills, reconcile them and book their differences."""

import re
from datetime import date, datetime

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Membership
from apps.accounts.selectors import has_estate_role
from apps.cloud import cur
from apps.cloud.models import CloudBill, CloudBillLine, CloudNode
from apps.core.currency import currency_error
from apps.ledger.closed import month_bounds

DEFAULT_MAX_BYTES = 1 << 30
MONTH = re.compile(r"^\d{4}-(0[1-9]|1[0-2])$")


def month_of(text: str) -> date:
    """The first day of a month given as YYYY-MM (``MONTH``)."""
    return date(int(text[:4]), int(text[5:7]), 1)


def may_reconcile(user) -> bool:
    """Finance and IT over the whole estate: a bill is the estate's."""
    return has_estate_role(user, Membership.Role.FINANCE, Membership.Role.IT_ADMIN)


def max_bytes() -> int:
    return getattr(settings, "CLOUD_BILL_MAX_BYTES", DEFAULT_MAX_BYTES)


def latest(month: date) -> CloudBill | None:
    """The month's bill reconciliation reads: the latest imported."""
    return CloudBill.objects.filter(month=month.replace(day=1)).select_related("imported_by").first()


def _refused(reason: str) -> ValidationError:
    return ValidationError({"file": reason})


@transaction.atomic
def import_bill(
    upload, month: date, *, actor=None, via: str = CloudBill.Via.PORTAL, now: datetime | None = None
) -> CloudBill:
    """Read ``upload`` (a Django upload or any seekable binary file with a ``name``) and store the
    EC2 instance usage of ``month``; a file Klique cannot use is a ``ValidationError`` on ``file``."""
    month = month.replace(day=1)
    size = getattr(upload, "size", None)
    if size is not None and size > max_bytes():
        raise _refused(f"The file has {size} bytes; at most {max_bytes()} are read.")
    start, end = month_bounds(month)
    try:
        found = cur.read(getattr(upload, "file", upload), start, end)
    except cur.BillFileError as error:
        raise _refused(str(error)) from None
    if not found.rows:
        raise _refused(
            f"No EC2 instance usage of {month:%B %Y} in this file ({found.read} rows read, "
            f"{found.outside} of instance usage in other months)."
        )
    currencies = sorted({row.currency for row in found.rows})
    if len(currencies) > 1:
        raise _refused(f"The lines are in more than one currency: {', '.join(currencies)}.")
    if error := currency_error(currencies[0]):
        raise _refused(f"line_item_currency_code: {error}")
    ids = {row.instance_id for row in found.rows}
    nodes = dict(CloudNode.objects.filter(instance_id__in=ids).values_list("instance_id", "pk"))
    lines = [
        CloudBillLine(
            instance_id=row.instance_id[:80],
            instance_type=row.instance_type[:60],
            usage_start=row.start,
            usage_end=row.end,
            hours=row.hours,
            cost=row.cost,
            rate=row.rate,
            tagged_pool=row.tagged_pool[:80],
            node_id=nodes.get(row.instance_id),
        )
        for row in found.rows
    ]
    bill = CloudBill.objects.create(
        month=month,
        file_name=(getattr(upload, "name", "") or "bill").rsplit("/", 1)[-1][:255],
        file_format=found.file_format,
        currency=currencies[0],
        imported_by=actor,
        imported_at=now or timezone.now(),
        via=via,
        rows_read=found.read,
        rows_kept=len(lines),
        rows_other=found.other,
        rows_outside=found.outside,
        lines_matched=sum(1 for line in lines if line.node_id),
    )
    for line in lines:
        line.bill = bill
    CloudBillLine.objects.bulk_create(lines, batch_size=5000)
    return bill
