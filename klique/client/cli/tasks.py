"""Tasks on the command line: ``klique submit``, ``ls``, ``status`` and ``cancel``, and following
a task to its end with ``--wait``."""

import sys

from klique import numbers
from klique.client.cli.bulk import submit_from
from klique.client.cli.exits import FAILED, OK, TASK_CANCELED, TASK_TIMED_OUT, USAGE
from klique.client.cli.inputs import (
    priority_option,
    task_ids,
    task_template,
    time_option,
    waiting,
    whole_number,
)
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
    return {"succeeded": OK, "canceled": TASK_CANCELED, "timed_out": TASK_TIMED_OUT}.get(final.state, FAILED)


def flat(lists) -> list[int] | None:
    """``--after-ok 1,2 --after-ok 3`` as [1, 2, 3]; None when not given."""
    return [task_id for ids in lists for task_id in ids] if lists else None


def cmd_submit(args, client: Client) -> int:
    if args.from_file is not None:
        template = (args.resource, args.command, args.gpus, args.nodes, args.project, args.name)
        options = (args.priority, args.time_limit, args.after_ok, args.after_any)
        options += (args.array, args.max_running)
        if any(template) or any(x is not None for x in options) or args.checkpoint or args.wait:
            return usage_from()
        if args.batch < 1:
            print("klique submit: --batch takes 1 or more", file=sys.stderr)
            return USAGE
        return submit_from(args, client)
    if args.max_running is not None and args.array is None:
        print("klique submit: --max-running caps an array; give --array N too", file=sys.stderr)
        return USAGE
    if args.array is not None and args.wait:
        print("klique submit: --wait follows one task; an array has many (klique ls)", file=sys.stderr)
        return USAGE
    if args.array is not None and args.array < 1:
        print("klique submit: --array takes 1 or more", file=sys.stderr)
        return USAGE
    if not args.resource:
        print("klique submit: give the compute resource (or --from FILE)", file=sys.stderr)
        return USAGE
    if not args.command:
        print(
            "klique submit: give the command after --: klique submit vision/a100 -- python train.py",
            file=sys.stderr,
        )
        return USAGE
    fields = {
        "gpus": args.gpus,
        "nodes": args.nodes,
        "project": args.project,
        "name": args.name,
        "checkpoint": args.checkpoint,
        "priority": args.priority,
        "time_limit_s": args.time_limit,
        "after_ok": flat(args.after_ok),
        "after_any": flat(args.after_any),
    }
    if args.array is not None:
        array = client.submit_array(
            args.resource, args.command, size=args.array, max_running=args.max_running, **fields
        )
        ids = array.task_ids
        cap = f", at most {array.max_running} at once" if array.max_running else ""
        shown = f"tasks {ids[0]} to {ids[-1]}" if len(ids) > 1 else f"task {ids[0]}"
        show(args, array, f"Submitted array {array.id} ({shown}{cap}) to {args.resource}.")
        return OK
    task = client.submit(args.resource, args.command, **fields)
    where = f"{task.compute_resource}" + (f" ({size(task)} GPUs)" if task.nodes > 1 else "")
    if args.wait:
        if not args.json:
            print(f"Submitted task {task.id} to {where}.")
        return wait_for(args, client, task)
    show(args, task, f"Submitted task {task.id} to {where}: {describe(task)}.")
    return OK


def usage_from() -> int:
    print(
        "klique submit --from FILE takes every field of each task from the file; give no RESOURCE, "
        "command, --gpus, --nodes, --project, --name, --priority, --time, --after-ok, --after-any, "
        "--array, --max-running, --checkpoint or --wait",
        file=sys.stderr,
    )
    return USAGE


def cmd_ls(args, client: Client) -> int:
    tasks = client.tasks(state=args.state, mine=args.mine, limit=args.limit)
    rows = [
        [
            t.id,
            t.state.replace("_", " "),
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
    lines += limits_text(task)
    if task.verdict:
        words = task.verdict.message or task.verdict.rule.replace("_", " ")
        lines.append(f"  why waiting       {words}")
    if task.preemptions:
        lines.append(f"  preemptions       {task.preemption_count}")
        for event in task.preemptions:
            pool = f" on {event.pool}" if event.pool else ""
            lines.append(
                f"    {when(event.at)}  {event.kind}{pool}: {REASONS.get(event.reason, event.reason)}"
            )
    return "\n".join(lines)


def limits_text(task: Task) -> list[str]:
    """The task's time limit, the tasks it runs after and that run after it, and its array."""
    lines = []
    if task.time_limit_s is not None:
        left = task.time_left_s
        if task.done:
            left_text = "ran " + numbers.duration(task.ran_s)
        elif left is not None and left <= 0:
            left_text = "reached"
        else:
            left_text = f"{numbers.duration(left)} left"
        lines.append(f"  time limit        {numbers.duration(task.time_limit_s)} ({left_text})")
    elif task.kind == "batch":
        lines.append("  time limit        none")
    for label, links in (("runs after", task.dependencies), ("runs before", task.dependants)):
        for index, link in enumerate(links):
            kind = "if it succeeds" if link.kind == "after_ok" else "whatever its end"
            if label == "runs before":
                kind = "if this succeeds" if link.kind == "after_ok" else "whatever this ends"
            head = label if index == 0 else ""
            lines.append(f"  {head:<18}task {link.task} ({link.state.replace('_', ' ')}), {kind}")
    if task.array is not None:
        lines.append(f"  array             {task.array}, index {task.array_index} (KLIQUE_ARRAY_INDEX)")
    return lines


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
    time_option(submit)
    after = (("ok", "if they succeed (else this task is canceled)"), ("any", "whatever their end"))
    for kind, words in after:
        submit.add_argument(
            f"--after-{kind}",
            type=task_ids,
            action="append",
            metavar="ID[,ID]",
            help=f"run after these tasks of yours, {words}; repeat or separate ids with commas",
        )
    submit.add_argument(
        "--array",
        type=whole_number,
        metavar="N",
        help="submit N tasks of this spec, each with KLIQUE_ARRAY_INDEX set (0 to N-1)",
    )
    submit.add_argument(
        "--max-running",
        type=whole_number,
        metavar="M",
        help="with --array: at most M of them placed or running at once",
    )
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
        "failed, canceled, timed_out, or as the portal says waiting, requeued, done; the server checks it",
    )
    ls.add_argument("--mine", action="store_true", help="only the tasks you submitted")
    ls.add_argument("--limit", type=int, default=50)
    status = command(
        "status", cmd_status, "where a task is, why it waits, its time limit, dependencies and preemptions"
    )
    status.add_argument("id", type=int)
    waiting(status)
    cancel = command("cancel", cmd_cancel, "cancel a task")
    cancel.add_argument("id", type=int)
