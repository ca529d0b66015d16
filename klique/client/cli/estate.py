"""``klique maintenance`` (pools' maintenance windows: everyone lists them, IT schedules and ends
them) and ``klique loans`` (dated quota loans: list, lend, give back, or ask through a change
request). A moment is a duration from now (``7d``, ``12h``, as ``--time`` reads it) or an ISO
8601 date-time (UTC when it names no zone)."""

import argparse
import functools
from datetime import UTC, datetime, timedelta

from klique.client.cli.exits import OK
from klique.client.cli.output import show, table, when
from klique.client.sdk.client import Client
from klique.client.sdk.loans import WHAT
from klique.durations import DurationError, parse_duration


@functools.cache
def now() -> datetime:
    """The one "now" of a command line: ``--start 1h --end 3h`` is two hours to the second."""
    return datetime.now(UTC).replace(microsecond=0)


def moment(text: str) -> datetime:
    """``--until 7d`` or ``--until 2026-07-01T18:00+02:00``: an aware datetime."""
    try:
        return now() + timedelta(seconds=parse_duration(text))
    except DurationError:
        pass
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither a duration from now (7d, 12h, 90m) nor an ISO 8601 date-time "
            "(2026-07-01T18:00Z)"
        ) from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def window_state(window) -> str:
    if window.in_force:
        return "in force"
    if window.ended_at is not None:
        return "ended early" if window.ended_at > window.starts_at else "called off"
    return "over" if window.end <= now() else "scheduled"


def window_rows(windows) -> str:
    rows = [[w.id, w.pool, when(w.starts_at), when(w.end), window_state(w), w.note] for w in windows]
    headers = ["ID", "POOL", "FROM", "TO", "STATE", "NOTE"]
    return table(headers, rows) if rows else "No maintenance windows."


def cmd_maintenance_list(args, client: Client) -> int:
    windows = client.maintenance(history=args.all)
    show(args, windows, window_rows(windows))
    return OK


def cmd_maintenance_schedule(args, client: Client) -> int:
    window = client.schedule_maintenance(args.pool, args.start, args.end, note=args.note)
    text = f"Maintenance window {window.id}: pool {window.pool} from {when(window.starts_at)}"
    text += f" to {when(window.end)}."
    show(args, window, text)
    return OK


def cmd_maintenance_end(args, client: Client) -> int:
    window = client.end_maintenance(args.id)
    show(args, window, f"Maintenance window {window.id} on pool {window.pool} ended at {when(window.end)}.")
    return OK


def loan_rows(loans) -> str:
    rows = [
        [
            loan.id,
            loan.lender,
            loan.borrower,
            loan.text,
            when(loan.ends_at),
            f"{loan.state}: give-back refused: {loan.revert_error}" if loan.revert_error else loan.state,
            loan.note,
        ]
        for loan in loans
    ]
    headers = ["ID", "LENDER", "BORROWER", "LENT", "UNTIL", "STATE", "NOTE"]
    return table(headers, rows) if rows else "No loans."


def cmd_loans_list(args, client: Client) -> int:
    loans = client.loans(args.state, what=args.what)
    show(args, loans, loan_rows(loans))
    return OK


def cmd_loans_lend(args, client: Client) -> int:
    loan = client.lend(
        args.lender, args.borrower, args.what, args.amount, args.until, period=args.period, note=args.note
    )
    show(
        args,
        loan,
        f"Loan {loan.id}: {loan.text} from {loan.lender} to {loan.borrower} until {when(loan.ends_at)}.",
    )
    return OK


def cmd_loans_give_back(args, client: Client) -> int:
    loan = client.give_back(args.id)
    show(args, loan, f"Loan {loan.id} ({loan.text}) is given back to {loan.lender}.")
    return OK


def cmd_loans_ask(args, client: Client) -> int:
    request = client.ask_loan(
        args.group, args.lender, args.what, args.amount, args.until, args.justification, period=args.period
    )
    approver = f"the {request.approver_role.replace('_', ' ')} of {request.approver_group or 'the estate'}"
    show(args, request, f"Change request {request.id} is {request.state}: {approver} decides it.")
    return OK


def loan_options(sub: argparse.ArgumentParser) -> None:
    sub.add_argument("--what", required=True, choices=WHAT, help="what is lent")
    sub.add_argument("--amount", required=True, help="GPUs, or budget hours")
    sub.add_argument(
        "--until", required=True, type=moment, metavar="WHEN", help="when it is given back: 7d, or ISO 8601"
    )
    sub.add_argument("--period", help="for budget hours: the budget window (day, week, month)")


def register(commands, command) -> None:
    now.cache_clear()  # a new command line
    maintenance = commands.add_parser("maintenance", help="pools' maintenance windows (IT schedules them)")
    actions = maintenance.add_subparsers(dest="maintenance_command", required=True, metavar="ACTION")
    listed = command("list", cmd_maintenance_list, "the windows not over, in start order", actions)
    listed.add_argument("--all", action="store_true", help="every window, ended ones too")
    schedule = command(
        "schedule", cmd_maintenance_schedule, "schedule a window on a pool (IT admins)", actions
    )
    schedule.add_argument("pool", metavar="POOL", help="the pool's name")
    schedule.add_argument(
        "--start", required=True, type=moment, metavar="WHEN", help="1h (from now), or ISO 8601"
    )
    schedule.add_argument(
        "--end", required=True, type=moment, metavar="WHEN", help="5h (from now), or ISO 8601"
    )
    schedule.add_argument("--note", default="", help="shown to users, e.g. 'driver upgrade'")
    end = command("end", cmd_maintenance_end, "end a window now; before its start: call it off (IT)", actions)
    end.add_argument("id", type=int)

    loans = commands.add_parser("loans", help="dated quota loans between groups")
    actions = loans.add_subparsers(dest="loans_command", required=True, metavar="ACTION")
    listed = command("list", cmd_loans_list, "the loans of the groups you belong to or see", actions)
    listed.add_argument("--state", choices=["active", "ended"])
    listed.add_argument("--what", choices=WHAT)
    lend = command("lend", cmd_loans_lend, "lend at once (whoever may split the quota above both)", actions)
    lend.add_argument("--lender", required=True, metavar="GROUP", help="the group that lends (slug)")
    lend.add_argument("--borrower", required=True, metavar="GROUP", help="the group that borrows (slug)")
    loan_options(lend)
    lend.add_argument("--note", default="", help="why, shown on both groups' pages")
    back = command("give-back", cmd_loans_give_back, "give a loan back now", actions)
    back.add_argument("id", type=int)
    ask = command("ask", cmd_loans_ask, "ask for a loan to your group: a change request", actions)
    ask.add_argument("--group", required=True, metavar="GROUP", help="your group, the borrower (slug)")
    ask.add_argument("--lender", required=True, metavar="GROUP", help="the group that would lend (slug)")
    loan_options(ask)
    ask.add_argument("--justification", required=True, help="why; the approver reads it")
