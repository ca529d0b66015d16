"""Usage, time and money budgets on the command line: ``klique usage`` and ``klique budget``."""

from klique import numbers
from klique.client.cli.exits import OK
from klique.client.cli.output import amount, hours, show, table, when
from klique.client.sdk.client import Client


def cmd_usage(args, client: Client) -> int:
    usage = client.usage()
    rows = [
        [
            u.group,
            amount(u.gpus_in_use),
            amount(u.reservation),
            amount(u.limit),
            hours(u.gpu_hours),
            u.period or "month",
        ]
        for u in usage
    ]
    headers = ["GROUP", "GPUS IN USE", "RESERVED", "LIMIT", "GPU-HOURS", "PERIOD"]
    show(args, usage, table(headers, rows) if rows else "No policies in your groups.")
    return OK


def cmd_budget(args, client: Client) -> int:
    """One row per time budget window of each budgeted policy, then one per money budget window;
    the run-out in the portal's words (the server's ``run_out_text``: a run-out after the reset
    "lasts until reset")."""
    usage = client.usage()
    rows = [
        [
            u.group,
            w.period,
            hours(w.used_hours),
            hours(w.budget_hours),
            "-" if w.left_hours is None else numbers.hours_left(w.left_hours),
            hours(w.burn_rate),
            w.run_out or when(w.projected_run_out),
            when(w.resets_at),
            "USED UP" if w.used_up else ("over alert threshold" if w.over_threshold else ""),
        ]
        for u in usage
        if u.has_budget
        for w in (u.windows or (u,))
    ]
    headers = ["GROUP", "PERIOD", "USED H", "BUDGET H", "LEFT H", "BURN H/H", "RUNS OUT", "RESETS", ""]
    budgeted = [u for u in usage if u.has_budget or u.money_windows]
    text = table(headers, rows) if rows else "No time budgets on your groups."
    money = [
        [
            u.group,
            w.period,
            numbers.money(w.spent, w.currency),
            numbers.money(w.amount, w.currency),
            numbers.money(w.left, w.currency),
            numbers.money(w.burn_rate, w.currency),
            w.run_out or when(w.projected_run_out),
            when(w.resets_at),
            "USED UP" if w.used_up else ("over alert threshold" if w.over_threshold else ""),
        ]
        for u in usage
        for w in u.money_windows
    ]
    if money:
        headers = ["GROUP", "PERIOD", "SPENT", "BUDGET", "LEFT", "BURN /H", "RUNS OUT", "RESETS", ""]
        text += "\n\nMoney budgets:\n" + table(headers, money)
    show(args, budgeted, text)
    return OK


def register(commands, command) -> None:
    command("usage", cmd_usage, "GPUs in use and GPU-hours of your groups")
    command("budget", cmd_budget, "time and money budgets of your groups: used, left, burn rate, run-out")
