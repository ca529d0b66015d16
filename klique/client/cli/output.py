"""How the CLI writes what it shows: GPU amounts, hours, times, tables, a task's one-line state,
and the record itself as JSON with ``--json``."""

import json
from decimal import Decimal

from klique import numbers
from klique.client.cli.exits import OK
from klique.client.sdk.records import as_json
from klique.client.sdk.tasks import Task

REASONS = {
    "reclaim": "reclaimed for another group's reservation",
    "budget": "the group's time budget is used up",
    "worker_lost": "its worker was lost",
    "unclaimed": "no worker claimed it in time",
    "canceled": "canceled",
    "idle": "stopped by its idle limits",
    "time_limit": "stopped at its time limit",
    "dependency_failed": "a task it runs after did not succeed",
}


def amount(value: Decimal | None) -> str:
    """GPUs or a time weight as klique/numbers.py writes them ("8", "0.5")."""
    return "-" if value is None else numbers.gpus(value)


def hours(value: Decimal | None) -> str:
    """Hours with at most one decimal, as on the portal's pages (``--json`` keeps them whole)."""
    return "-" if value is None else numbers.hours(value)


def size(task: Task) -> str:
    """A task's GPUs, or on several nodes its nodes times its GPUs per node ("2 x 4")."""
    return f"{task.nodes} x {amount(task.gpus)}" if task.nodes > 1 else amount(task.gpus)


def when(value) -> str:
    return "-" if value is None else value.strftime("%Y-%m-%d %H:%M UTC")


def table(headers: list[str], rows: list[list]) -> str:
    cells = [headers, *[["-" if c is None else str(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join(
        "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    )


def describe(task: Task) -> str:
    """One line a person reads: where the task is and, while it waits, why."""
    if task.state == "queued":
        line = f"queued at position {task.queue_position}"
        if task.verdict and task.verdict.message:
            line += f": {task.verdict.message}"
        elif task.verdict is None:
            line += ", waiting for the engine's next pass"
        return line
    if task.state == "placed":
        return f"placed on pool {task.pool}, waiting for a worker to start it"
    if task.state == "running":
        return f"running on pool {task.pool}"
    if task.state == "stopping":
        return f"stopping on pool {task.pool}: {REASONS.get(task.stop_reason, task.stop_reason)}"
    if task.state == "canceled":
        if task.stop_reason == "dependency_failed":
            return f"canceled: {REASONS['dependency_failed']}"
        return "canceled"
    if task.state == "timed_out":
        return f"timed out: stopped at its time limit ({numbers.duration(task.time_limit_s)})"
    if task.state == "failed" and task.failure:
        return f"failed: {task.failure}"
    return f"{task.state} (exit code {task.exit_code})"


def show(args, record, text: str) -> None:
    print(json.dumps(as_json(record), indent=2) if args.json else text)


def stopped(args, task: Task, noun: str, asked: str) -> int:
    """Show a task that was canceled or stopped: ended, or ``asked`` while its work stops."""
    show(args, task, f"{noun} {task.id}: {describe(task) if task.done else f'{asked}, {describe(task)}'}")
    return OK
