"""``klique bill reconcile --month 2026-11``: a month's cloud bill against what Klique charged for
its cloud nodes, per pool, with the difference's causes (finance and IT at the organisation's root;
docs/cloud.md, "Reconciling the cloud bill"). Import the bill on the portal or the API first."""

import re
import sys

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


def cmd_reconcile(args, client: Client) -> int:
    if not re.fullmatch(r"\d{4}-(0[1-9]|1[0-2])", args.month):
        print("klique: give the month as YYYY-MM, such as 2026-11", file=sys.stderr)
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
