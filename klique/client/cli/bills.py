"""``klique bill import FILE --month 2026-11`` imports a month's AWS CUR 2.0 file (CSV, gzip'd CSV
or Parquet); ``klique bill reconcile --month 2026-11`` shows that month's bill against what Klique
charged for its cloud nodes, per pool, with the difference's causes (finance and IT at the
organisation's root; docs/cloud.md, "Reconciling the cloud bill")."""

import re
import sys
from pathlib import Path

from klique import numbers
from klique.client.cli.exits import OK, USAGE
from klique.client.cli.output import show, table
from klique.client.sdk.client import Client

FIGURES = ["klique", "bill", "difference", "unmatched", "missing", "price", "hours"]
HEADERS = [
    "POOL",
    "KLIQUE",
    "BILL",
    "DIFFERENCE",
    "UNKNOWN INSTANCES",
    "MISSING NODES",
    "PRICE",
    "HOURS",
    "BOOKED",
]


def _month_ok(month: str) -> bool:
    if re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", month):
        return True
    print("klique: give the month as YYYY-MM, such as 2026-11", file=sys.stderr)
    return False


def cmd_import(args, client: Client) -> int:
    if not _month_ok(args.month):
        return USAGE
    path = Path(args.file)
    if not path.is_file():
        print(f"klique: no such file: {path}", file=sys.stderr)
        return USAGE
    with path.open("rb") as stream:
        bill = client._request(
            "POST", "cloud/bills/", data={"month": args.month}, files={"file": (path.name, stream)}
        )
    show(
        args,
        bill,
        f"Imported {bill['file_name']} as the cloud bill of {args.month}: "
        f"{numbers.plural(bill['rows_kept'], 'line')} of instance usage in {bill['currency']}, "
        f"{numbers.count(bill['lines_matched'])} of instances Klique launched. "
        f"See it against Klique's charges: klique bill reconcile --month {args.month}",
    )
    return OK


def cmd_reconcile(args, client: Client) -> int:
    if not _month_ok(args.month):
        return USAGE
    found = client._request("GET", "cloud/bills/reconciliation/", params={"month": args.month})
    currency = found["currency"]
    rows = [
        [
            pool["pool"] or "(no pool)",
            *(numbers.money(pool[name], currency) for name in FIGURES),
            numbers.money(pool["booking"]["amount"], currency) if pool["booking"] else "",
        ]
        for pool in found["pools"]
    ]
    bill = found["bill"]
    head = (
        f"Cloud bill of {args.month} ({bill['file_name']}, "
        f"{numbers.plural(bill['rows_kept'], 'line')} of instance usage), "
        f"{'closed' if found['closed'] else 'open'} month:"
    )
    show(args, found, f"{head}\n{table(HEADERS, rows)}")
    return OK


def register(commands, command) -> None:
    bill = commands.add_parser("bill", help="the cloud bill reconciled (finance and IT)")
    sub = bill.add_subparsers(dest="bill_command", required=True, metavar="COMMAND")
    reconcile = command(
        "reconcile", cmd_reconcile, "a month's cloud bill against what Klique charged, per pool", parent=sub
    )
    reconcile.add_argument("--month", required=True, help="the UTC month, as 2026-11")
    imported = command("import", cmd_import, "import a month's AWS CUR 2.0 file (CSV or Parquet)", parent=sub)
    imported.add_argument("file", help="the CUR 2.0 file: .csv, .csv.gz or .parquet")
    imported.add_argument("--month", required=True, help="the UTC month of its usage, as 2026-11")
