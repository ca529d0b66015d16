"""``klique resources``: the compute resources the user may submit to."""

from klique import numbers
from klique.client.cli.exits import OK
from klique.client.cli.output import amount, show, table
from klique.client.sdk.client import Client


def cmd_resources(args, client: Client) -> int:
    resources = client.compute_resources()
    rows = [
        [
            r.name,
            r.group,
            r.profile,
            amount(r.gpus) + (" (set per task)" if r.size_from_task else ""),
            amount(r.time_weight),
            amount(r.reservation),
            amount(r.limit),
            time_limits(r.default_time_limit_s, r.max_time_limit_s),
            r.waiting,
            r.running,
            "" if r.enabled else "disabled",
        ]
        for r in resources
    ]
    headers = ["NAME", "GROUP", "PROFILE", "GPUS", "WEIGHT", "RESERVED", "LIMIT", "TIME LIMIT"]
    headers += ["WAITING", "RUNNING", ""]
    show(args, resources, table(headers, rows) if rows else "You belong to no group with compute resources.")
    return OK


def time_limits(default: int | None, most: int | None) -> str:
    """A compute resource's time limits: "1 h (at most 4 h)", or "-" without either."""
    if default is None and most is None:
        return "-"
    shown = numbers.duration(default) if default is not None else "none"
    return shown + (f" (at most {numbers.duration(most)})" if most is not None else "")


def register(commands, command) -> None:
    command("resources", cmd_resources, "the compute resources you may submit to")
