"""``klique lost-work GROUP [--period month|week|day|YYYY-MM]``: the GPU-hours the group's
preemptions lost in the period, per group of its subtree and reason (docs/engine.md, "Lost work")."""

from klique import numbers
from klique.client.cli.exits import OK
from klique.client.cli.output import show, table
from klique.client.sdk.client import Client

HEADERS = ["GROUP", "REASON", "PREEMPTIONS", "LOST GPU-HOURS"]


def cmd_lost_work(args, client: Client) -> int:
    found = client._request("GET", f"groups/{args.group}/lost-work/", params={"period": args.period})
    rows = [
        [line["group"], line["reason"], numbers.count(line["preemptions"]), numbers.hours(line["gpu_hours"])]
        for line in found["lines"]
    ]
    head = (
        f"Work lost to preemptions in {found['group']} from {found['period_start'][:10]} until "
        f"{found['period_end'][:10]}: {numbers.hours(found['gpu_hours'])} GPU-hours"
    )
    show(args, found, f"{head}\n{table(HEADERS, rows)}" if rows else f"{head}.")
    return OK


def register(commands, command) -> None:
    sub = command(
        "lost-work", cmd_lost_work, "GPU-hours your groups' preempted work lost, per group and reason"
    )
    sub.add_argument("group", help="the group's slug")
    sub.add_argument("--period", default="month", help="day, week, month (current, UTC) or YYYY-MM")
