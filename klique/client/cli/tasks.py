"""Tasks on the command line: ``klique submit``, ``ls``, ``status`` and ``cancel``, and following
a task to its end with ``--wait``."""

import sys

from klique.client.cli.bulk import submit_from
from klique.client.cli.exits import FAILED, OK, TASK_CANCELED, USAGE
from klique.client.cli.inputs import priority_option, task_template, waiting, whole_number
from klique.client.cli.output import REASONS, amount, describe, show, size, stopped, table, when
from klique.client.sdk.client import Client
from klique.client.sdk.tasks import Task


def wait_for(args, client: Client, task: Task) -> int:
    """Follow a task to its end with a live status line; the exit code tells how it ended."""
    out = sys.stderr if args.json else sys.stdout
    live = out.isatty()
    last = {"state": None, "preemptions": task.preemption_count}

    def on_change(current: Task) -> None:
        if current.preemption_count > last["preemptions"]:
            reason = REASONS.get(current.last_preemption_reason, current.last_preemption_reason)
            print(("\n" if live else "") + f"task {current.id}: requeued: {reason}", file=out, flush=True)
            last["preemptions"], last["state"] = current.preemption_count, None
        line = f"task {current.id}: {describe(current)}"
        if live:
            end = "\n" if current.done else ""
            prefix = "\n" if last["state"] not in (None, current.state) else "\r\x1b[K"
            print(prefix + line, end=end, file=out, flush=True)
        else:
            print(line, file=out, flush=True)
        last["state"] = current.state

    final = client.wait(task.id, poll=args.poll, timeout=args.timeout, on_change=on_change)
    if args.json:
        show(args, final, "")
    return {"succeeded": OK, "failed": FAILED, "canceled": TASK_CANCELED}[final.state]


def cmd_submit(args, client: Client) -> int:
    if args.from_file is not None:
        template = (args.resource, args.command, args.gpus, args.nodes, args.project, args.name)
        if any(template) or args.priority is not None or args.checkpoint or args.wait:
            print(
                "klique submit --from FILE takes every field of each task from the file; give no "
                "RESOURCE, command, --gpus, --nodes, --project, --name, --priority, --checkpoint or --wait",
                file=sys.stderr,
            )
            return USAGE
        if args.batch < 1:
            print("klique submit: --batch takes 1 or more", file=sys.stderr)
            return USAGE
        return submit_from(args, client)
    if not args.resource:
        print("klique submit: give the compute resource (or --from FILE)", file=sys.stderr)
        return USAGE
    if not args.command:
        print(
            "klique submit: give the command after --: klique submit vision/a100 -- python train.py",
            file=sys.stderr,
        )
        return USAGE
    task = client.submit(
        args.resource,
        args.command,
        gpus=args.gpus,
        nodes=args.nodes,
        project=args.project,
        name=args.name,
        checkpoint=args.checkpoint,
        priority=args.priority,
    )
    where = f"{task.compute_resource}" + (f" ({size(task)} GPUs)" if task.nodes > 1 else "")
    if args.wait:
        if not args.json:
            print(f"Submitted task {task.id} to {where}.")
        return wait_for(args, client, task)
    show(args, task, f"Submitted task {task.id} to {where}: {describe(task)}.")
    return OK


def cmd_ls(args, client: Client) -> int:
    tasks = client.tasks(state=args.state, mine=args.mine, limit=args.limit)
    rows = [
        [
            t.id,
            t.state,
            t.compute_resource,
            size(t),
            t.pool,
            t.queue_position,
            t.user,
            t.name,
            when(t.submitted_at),
        ]
        for t in tasks
    ]
    headers = ["ID", "STATE", "RESOURCE", "GPUS", "POOL", "POSITION", "USER", "NAME", "SUBMITTED"]
    show(args, tasks, table(headers, rows) if rows else "No tasks.")
    return OK


def task_text(task: Task) -> str:
    lines = [
        f"task {task.id}{f' ({task.name})' if task.name else ''}: {describe(task)}",
        f"  compute resource  {task.compute_resource} (group {task.group}, profile {task.profile})",
        f"  GPUs              {size(task)}"
        + (f" ({amount(task.counted_gpus)} counted: GPUs per node x nodes)" if task.nodes > 1 else ""),
        f"  submitted         {when(task.submitted_at)} by {task.user} via {task.channel}",
        f"  command           {task.command}",
    ]
    if task.project:
        lines.append(f"  project           {task.project}")
    priority = f"{task.priority} ({task.priority_class})" if task.priority_class else str(task.priority)
    lines.append(f"  priority          {priority}")
    if task.fair_share:
        fair = task.fair_share
        lines.append(
            f"  fair share        {task.group} holds {amount(fair.borrowed)} of its fair "
            f"{amount(fair.share)} borrowed GPUs ({fair.parent} shares fairly)"
        )
    if task.verdict:
        lines.append(f"  why waiting       {task.verdict.rule}: {task.verdict.message}")
    if task.preemptions:
        lines.append(f"  preemptions       {task.preemption_count}")
        for event in task.preemptions:
            pool = f" on {event.pool}" if event.pool else ""
            lines.append(
                f"    {when(event.at)}  {event.kind}{pool}: {REASONS.get(event.reason, event.reason)}"
            )
    return "\n".join(lines)


def cmd_status(args, client: Client) -> int:
    task = client.task(args.id)
    if args.wait and not task.done:
        return wait_for(args, client, task)
    show(args, task, task_text(task))
    return OK


def cmd_cancel(args, client: Client) -> int:
    return stopped(args, client.cancel(args.id), "task", "cancel requested")


def register(commands, command) -> None:
    submit = command(
        "submit",
        cmd_submit,
        "submit a task, or many from a file",
        usage="klique submit [options] RESOURCE -- COMMAND...\n"
        "       klique submit --from FILE [--batch N] [--json]",
    )
    task_template(submit, resource_nargs="?")
    submit.add_argument("--name", default="", help="a name for the task")
    priority_option(submit)
    submit.add_argument(
        "--from",
        dest="from_file",
        metavar="FILE",
        help="submit the tasks of FILE ('-': standard input), a JSON array or JSON lines of tasks "
        "as POST /api/v1/tasks/ takes them, in batches (each all or none); prints their ids",
    )
    submit.add_argument(
        "--batch",
        type=whole_number,
        default=1000,
        metavar="N",
        help="with --from: tasks per request (default 1000, the server's default TASKS_BULK_MAX)",
    )
    waiting(submit)
    ls = command("ls", cmd_ls, "your tasks (and your groups' if you lead them), newest first")
    ls.add_argument(
        "--state",
        action="append",
        help="only this state (repeat for several): queued, placed, running, stopping, succeeded, "
        "failed, canceled, or as the portal says waiting, requeued, done; the server checks it",
    )
    ls.add_argument("--mine", action="store_true", help="only the tasks you submitted")
    ls.add_argument("--limit", type=int, default=50)
    status = command("status", cmd_status, "where a task is, why it waits, its preemptions")
    status.add_argument("id", type=int)
    waiting(status)
    cancel = command("cancel", cmd_cancel, "cancel a task")
    cancel.add_argument("id", type=int)
