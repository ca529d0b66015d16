"""``klique whatif``: replay a recorded period under changed rules, for scripted capacity planning
(IT admins; docs/whatif.md, "Runs: API, CLI and SDK"). Progress goes to standard error; the
side-by-side summary (or ``--json``) to standard output."""

import json
import sys

from klique import numbers
from klique.client.cli.exits import FAILED, INVALID, OK, USAGE
from klique.client.cli.inputs import BadInput, read_text, whole_number
from klique.client.cli.output import show, table
from klique.client.sdk.client import Client
from klique.client.sdk.whatif import WhatIfRun


class BadChanges(Exception):
    """A ``--changes`` file that cannot be read as a JSON object."""


def read_changes(source: str) -> dict:
    """The changes of a JSON file (``-``: standard input): one object of change kinds."""
    try:
        text = read_text(source)
    except BadInput as error:
        raise BadChanges(str(error)) from error
    try:
        changes = json.loads(text)
    except json.JSONDecodeError as error:
        raise BadChanges(f"{source} is not JSON: {error}") from error
    if not isinstance(changes, dict):
        raise BadChanges(f"{source} must hold a JSON object of change kinds, not {type(changes).__name__}")
    return changes


def _wait(value) -> str:
    return numbers.NONE if value is None else f"{numbers.count(value)} s"


def _pair(report: dict, path: tuple, fmt) -> str:
    """``base -> changed`` of one figure, or the one value when both sides agree."""
    values = []
    for side in ("base", "changed"):
        node = report[side]
        for key in path:
            node = node.get(key) if isinstance(node, dict) else None
        values.append(fmt(node))
    return values[0] if values[0] == values[1] else f"{values[0]} -> {values[1]}"


def summary(run: WhatIfRun) -> str:
    """The comparison side by side, base -> changed: per group the waits, the tasks past the
    threshold and the hours; per pool the utilisation; the preemptions."""
    report = run.report or {}
    period = f"{run.start:%Y-%m-%d %H:%M} to {run.end:%Y-%m-%d %H:%M} UTC"
    head = f"What-if run {run.id}{f' ({run.title})' if run.title else ''}: {period}, "
    head += f"{numbers.plural(run.tasks, 'task')}. Figures: recorded -> changed."
    past = f"WAITED > {numbers.count(report.get('wait_threshold_s', run.wait_threshold_s))} S"
    groups = [
        [
            name,
            numbers.count(figures["tasks"]),
            _pair(report, ("groups", name, "wait_median_s"), _wait),
            _pair(report, ("groups", name, "wait_p95_s"), _wait),
            _pair(report, ("groups", name, "waited_past_threshold"), numbers.count),
            _pair(report, ("groups", name, "gpu_hours"), numbers.hours),
            _pair(report, ("groups", name, "budget_hours"), numbers.hours),
        ]
        for name, figures in report.get("base", {}).get("groups", {}).items()
    ]
    pools = [
        [
            name,
            _pair(report, ("pools", name, "utilization"), numbers.percent),
            _pair(report, ("pools", name, "gpu_hours"), numbers.hours),
        ]
        for name in report.get("base", {}).get("pools", {})
    ]
    reasons = report.get("base", {}).get("preemptions", {})
    preempted = ", ".join(
        f"{reason} {_pair(report, ('preemptions', reason), numbers.count)}" for reason in reasons
    )
    return "\n\n".join(
        [
            head,
            table(["GROUP", "TASKS", "MEDIAN WAIT", "P95 WAIT", past, "GPU-HOURS", "BUDGET HOURS"], groups),
            table(["POOL", "UTILISATION", "GPU-HOURS"], pools),
            f"Preemptions: {preempted or 'none'}.",
        ]
    )


def progress_printer(args):
    """Print each new state and progress to standard error, on one live line on a terminal."""
    out = sys.stderr
    live = out.isatty()

    def on_progress(run: WhatIfRun) -> None:
        line = f"what-if run {run.id}: {run.state}, {numbers.percent(run.progress)}"
        if live:
            print("\r\x1b[K" + line, end="\n" if run.done else "", file=out, flush=True)
        else:
            print(line, file=out, flush=True)

    return on_progress


def cmd_whatif(args, client: Client) -> int:
    if args.no_wait and args.csv:
        print("klique whatif: --csv needs the finished run; leave out --no-wait", file=sys.stderr)
        return USAGE
    try:
        changes = read_changes(args.changes)
    except BadChanges as error:
        print(f"klique whatif: --changes: {error}", file=sys.stderr)
        return INVALID
    on_progress = None if args.no_wait else progress_printer(args)
    run = client.whatif(
        args.start,
        args.end,
        changes,
        groups=args.groups,
        wait_threshold_s=args.wait_threshold,
        title=args.title,
        wait=False,
    )
    if args.no_wait:
        show(
            args,
            run,
            f"Started what-if run {run.id} ({run.state}); GET /api/v1/whatif-runs/{run.id}/ follows it.",
        )
        return OK
    on_progress(run)
    run = client.wait_whatif(run.id, poll=args.poll, timeout=args.timeout, on_progress=on_progress)
    if run.state == "failed":
        print(f"klique: what-if run {run.id} failed: {run.error}", file=sys.stderr)
        if args.json:
            show(args, run, "")
        return FAILED
    if args.csv:
        text = client.whatif_csv(run.id)
        try:
            with open(args.csv, "w", encoding="utf-8", newline="") as handle:
                handle.write(text)
        except OSError as error:
            print(f"klique whatif: --csv: cannot write {args.csv}: {error}", file=sys.stderr)
            return INVALID
        print(f"CSV of what-if run {run.id} written to {args.csv}.", file=sys.stderr)
    show(args, run, summary(run))
    return OK


def register(commands, command) -> None:
    sub = command(
        "whatif",
        cmd_whatif,
        "replay a recorded period under changed rules, side by side (IT admins)",
        usage="klique whatif --start ISO --end ISO --changes FILE [--groups SLUG ...] "
        "[--wait-threshold S] [--title T] [--csv FILE] [--json] [--no-wait]",
    )
    sub.add_argument("--start", required=True, help="start of the period, ISO 8601 with offset (...Z)")
    sub.add_argument("--end", required=True, help="end of the period (exclusive), ISO 8601 with offset")
    sub.add_argument(
        "--changes",
        required=True,
        metavar="FILE",
        help='JSON object of changes (\'-\': standard input), e.g. {"reservations": {"vision": 24}}',
    )
    sub.add_argument("--groups", nargs="+", metavar="SLUG", help="only these groups' subtrees (default: all)")
    sub.add_argument(
        "--wait-threshold",
        type=whole_number,
        default=3600,
        metavar="S",
        help="count the tasks that waited longer than S seconds (default 3600)",
    )
    sub.add_argument("--title", default="", help="a title for the saved run")
    sub.add_argument("--csv", metavar="FILE", help="also write the comparison as CSV to FILE")
    sub.add_argument("--no-wait", action="store_true", help="start the run and print it; do not wait")
    sub.add_argument(
        "--timeout",
        type=float,
        default=3600,
        help="give up waiting after this many seconds (exit 9; default 3600)",
    )
    sub.add_argument("--poll", type=float, default=2.0, help="seconds between checks (default 2)")
