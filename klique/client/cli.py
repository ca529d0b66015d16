"""``klique``: the command line for people and scripts. Tables by default, ``--json`` for scripts.

Exit codes (scripts can rely on them):

    0  done; with --wait, the task succeeded
    1  with --wait, the task failed; or another error
    2  bad command line
    3  not logged in, or the token was refused (401)
    4  forbidden (403) or not found (404)
    5  the server refused the input (400); the reasons are printed per field
    6  the server could not be reached
    7  server error (5xx)
    8  with --wait, the task was canceled
    9  with --wait, the timeout passed before the task ended
  141  standard output was closed early (``klique ls | head``): quietly, as coreutils
"""

import argparse
import getpass
import json
import os
import re
import sys
import time
import webbrowser
from decimal import Decimal

from klique import numbers
from klique.client import config
from klique.client.sdk import (
    ApiError,
    AuthenticationFailed,
    Client,
    ConnectionFailed,
    InvalidRequest,
    KliqueError,
    NotFound,
    NotLoggedIn,
    PermissionDenied,
    ServerError,
    Task,
    WaitTimeout,
    as_json,
)

OK, FAILED, USAGE, AUTH, DENIED, INVALID, UNREACHABLE, SERVER, TASK_CANCELED, TIMED_OUT = range(10)
PIPE_CLOSED = 128 + 13  # killed by SIGPIPE, as the shell reports coreutils' ``ls | head``
EXIT_BY_ERROR = [
    (NotLoggedIn, AUTH),
    (AuthenticationFailed, AUTH),
    (PermissionDenied, DENIED),
    (NotFound, DENIED),
    (InvalidRequest, INVALID),
    (ServerError, SERVER),
    (ConnectionFailed, UNREACHABLE),
    (WaitTimeout, TIMED_OUT),
]
REASONS = {
    "reclaim": "reclaimed for another group's reservation",
    "budget": "the group's time budget is used up",
    "worker_lost": "its worker was lost",
    "unclaimed": "no worker claimed it in time",
    "canceled": "canceled",
    "idle": "stopped by its idle limits",
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


def whole_number(text: str) -> int:
    """A count typed on the command line: ASCII digits only (``int()`` would also take "1_0")."""
    if not re.fullmatch(r"[0-9]+", text, re.ASCII):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


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
        return "canceled"
    if task.state == "failed" and task.failure:
        return f"failed: {task.failure}"
    return f"{task.state} (exit code {task.exit_code})"


def show(args, record, text: str) -> None:
    print(json.dumps(as_json(record), indent=2) if args.json else text)


def cmd_login(args) -> int:
    stored = config.load()
    url = args.url or input(f"Klique URL [{stored['url'] or 'http://127.0.0.1:8000'}]: ").strip()
    url = url or stored["url"] or "http://127.0.0.1:8000"
    if not url.startswith(("http://", "https://")):
        print(f"klique login: the URL must start with http:// or https://, not {url!r}", file=sys.stderr)
        return USAGE
    token = args.token
    if token == "-" or (token is None and not sys.stdin.isatty()):
        token = sys.stdin.readline()
    elif token is None:
        token = getpass.getpass("Personal API token (create one at /account/tokens/): ")
    token = token.strip()
    ca_bundle = args.ca_bundle or stored["ca_bundle"]
    with Client(url, token, channel="cli", ca_bundle=ca_bundle) as client:
        me = client.me()
    path = config.save(url, token, ca_bundle)
    groups = ", ".join(f"{m['group']} ({m['role']})" for m in me.memberships) or "no groups yet"
    show(args, me, f"Logged in to {url} as {me.username}: {groups}.\nSaved to {path}.")
    return OK


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
            r.waiting,
            r.running,
            "" if r.enabled else "disabled",
        ]
        for r in resources
    ]
    headers = ["NAME", "GROUP", "PROFILE", "GPUS", "WEIGHT", "RESERVED", "LIMIT", "WAITING", "RUNNING", ""]
    show(args, resources, table(headers, rows) if rows else "You belong to no group with compute resources.")
    return OK


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


class BadInput(Exception):
    """A task file that cannot be read: the message names the item and what is wrong."""


def read_text(source: str) -> str:
    """A file's text (``-``: standard input); ``BadInput`` when it cannot be read."""
    try:
        if source == "-":
            return sys.stdin.read()
        with open(source, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise BadInput(f"cannot read {source}: {error}") from error


def read_items(source: str) -> list:
    """The tasks of a file (``-``: standard input): a JSON array of objects, or one object a line
    (JSON lines; blank lines skipped)."""
    text = read_text(source)
    if text.lstrip().startswith("["):
        try:
            items = json.loads(text)
        except json.JSONDecodeError as error:
            raise BadInput(f"{source} is not a JSON array: {error}") from error
        where = "item {}"
    else:
        items, where = [], "item {} (line {})"
        lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
        for index, (number, line) in enumerate(lines):
            try:
                items.append(json.loads(line))
            except json.JSONDecodeError as error:
                raise BadInput(f"{where.format(index, number)}: not JSON: {error}") from error
        where = "item {}"
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            raise BadInput(f"{where.format(index)}: a task is a JSON object, not {type(item).__name__}")
    if not items:
        raise BadInput(f"{source} holds no tasks")
    return items


def submit_from(args, client: Client) -> int:
    """Submit the tasks of ``--from`` in batches of ``--batch``, each all or none; print the ids.
    A refused batch stops there: the ids of the batches before it were printed (and submitted)."""
    try:
        items = read_items(args.from_file)
    except BadInput as error:
        print(f"klique submit: {error}", file=sys.stderr)
        return INVALID
    created: list[Task] = []
    for start in range(0, len(items), args.batch):
        try:
            batch = client.submit_many(items[start : start + args.batch])
        except InvalidRequest as error:
            print(
                f"klique: the server refused the input ({len(created)} tasks submitted before):",
                file=sys.stderr,
            )
            for field, reasons in error.errors.items():
                print(f"  {item_field(field, start)}: {' '.join(map(str, reasons))}", file=sys.stderr)
            if created and args.json:
                show(args, [t.id for t in created], "")
            return INVALID
        created.extend(batch)
        if not args.json:
            print("\n".join(str(task.id) for task in batch), flush=True)
    if args.json:
        show(args, created, "")
    return OK


def item_field(field: str, offset: int) -> str:
    """``tasks.3.gpus`` of a batch starting at ``offset`` as ``item 1003: gpus``."""
    parts = field.split(".", 2)
    if len(parts) == 3 and parts[0] == "tasks" and parts[1].isdigit():
        return f"item {offset + int(parts[1])}: {parts[2]}"
    return field


def cmd_submit(args, client: Client) -> int:
    if args.from_file is not None:
        template = (args.resource, args.command, args.gpus, args.nodes, args.project, args.name)
        if any(template) or args.checkpoint or args.wait:
            print(
                "klique submit --from FILE takes every field of each task from the file; give no "
                "RESOURCE, command, --gpus, --nodes, --project, --name, --checkpoint or --wait",
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


def stopped(args, task: Task, noun: str, asked: str) -> int:
    """Show a task that was canceled or stopped: ended, or ``asked`` while its work stops."""
    show(args, task, f"{noun} {task.id}: {describe(task) if task.done else f'{asked}, {describe(task)}'}")
    return OK


def cmd_cancel(args, client: Client) -> int:
    return stopped(args, client.cancel(args.id), "task", "cancel requested")


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
    """One row per time budget window of each budgeted policy."""
    usage = client.usage()
    rows = [
        [
            u.group,
            w.period,
            hours(w.used_hours),
            hours(w.budget_hours),
            "-" if w.left_hours is None else numbers.hours_left(w.left_hours),
            hours(w.burn_rate),
            when(w.projected_run_out),
            when(w.resets_at),
            "USED UP" if w.used_up else ("over alert threshold" if w.over_threshold else ""),
        ]
        for u in usage
        if u.has_budget
        for w in (u.windows or (u,))
    ]
    headers = ["GROUP", "PERIOD", "USED H", "BUDGET H", "LEFT H", "BURN H/H", "RUNS OUT", "RESETS", ""]
    budgeted = [u for u in usage if u.has_budget]
    show(args, budgeted, table(headers, rows) if rows else "No time budgets on your groups.")
    return OK


def schedule_rows(schedules) -> str:
    rows = [
        [
            s.id,
            s.name,
            s.cron,
            s.compute_resource,
            "active" if s.active else f"stopped: {s.stopped_reason or 'paused'}",
            when(s.next_run_at),
        ]
        for s in schedules
    ]
    return table(["ID", "NAME", "CRON (UTC)", "RESOURCE", "STATE", "NEXT"], rows) if rows else "No schedules."


def cmd_schedule_ls(args, client: Client) -> int:
    schedules = client.schedules()
    show(args, schedules, schedule_rows(schedules))
    return OK


def cmd_schedule_add(args, client: Client) -> int:
    if not args.command:
        print("klique schedule add: give the command after --", file=sys.stderr)
        return USAGE
    schedule = client.create_schedule(
        args.resource,
        args.command,
        cron=args.cron,
        name=args.name,
        gpus=args.gpus,
        nodes=args.nodes,
        project=args.project,
        checkpoint=args.checkpoint,
    )
    show(
        args,
        schedule,
        f"Schedule {schedule.id} ({schedule.name}) next submits at {when(schedule.next_run_at)}.",
    )
    return OK


def cmd_schedule_pause(args, client: Client) -> int:
    schedule = client.update_schedule(args.id, active=False)
    show(args, schedule, f"Schedule {schedule.id} is paused.")
    return OK


def cmd_schedule_resume(args, client: Client) -> int:
    schedule = client.update_schedule(args.id, active=True)
    show(args, schedule, f"Schedule {schedule.id} next submits at {when(schedule.next_run_at)}.")
    return OK


def cmd_schedule_rm(args, client: Client) -> int:
    client.delete_schedule(args.id)
    show(args, {"deleted": args.id}, f"Schedule {args.id} is deleted.")
    return OK


def session_state(task: Task) -> str:
    session = task.session
    if task.state == "running" and session is not None:
        return "ready" if session.ready else "starting"
    if task.done and task.stop_reason and task.stop_reason != "canceled":
        why = REASONS.get(task.stop_reason, task.stop_reason)
        limit = f" ({session.stopped_by})" if session is not None and session.stopped_by else ""
        return f"ended: {why}{limit}"
    return task.state


def cmd_session_start(args, client: Client) -> int:
    task = client.start_session(
        args.resource, kind=args.kind, gpus=args.gpus, project=args.project, name=args.name
    )
    show(
        args,
        task,
        f"Started session {task.id} ({task.session.kind if task.session else 'session'}) on "
        f"{task.compute_resource}: {describe(task)}. "
        f"`klique session open {task.id}` gives its link once ready.",
    )
    return OK


def cmd_session_ls(args, client: Client) -> int:
    sessions = client.sessions(limit=args.limit)
    rows = [
        [
            t.id,
            t.session.kind if t.session else "-",
            session_state(t),
            t.compute_resource,
            amount(t.gpus),
            t.session.url if t.session else None,
            when(t.submitted_at),
        ]
        for t in sessions
    ]
    headers = ["ID", "KIND", "STATE", "RESOURCE", "GPUS", "URL", "STARTED"]
    show(args, sessions, table(headers, rows) if rows else "No sessions.")
    return OK


def cmd_session_open(args, client: Client) -> int:
    deadline = time.monotonic() + (args.timeout or 0)
    task = client.session(args.id)
    while not (task.session and task.session.ready) and not task.done and time.monotonic() < deadline:
        time.sleep(args.poll)
        task = client.session(args.id)
    session = task.session
    if task.done or session is None or not session.ready:
        print(f"klique: session {task.id} is not ready: {session_state(task)}", file=sys.stderr)
        return TIMED_OUT if args.timeout and not task.done else FAILED
    if args.browser and session.open_url:
        webbrowser.open(session.open_url)
    show(
        args,
        session,
        f"URL    {session.url}\nToken  {session.token or '(only its owner sees the token)'}\n"
        f"Open   {session.open_url or session.url}",
    )
    return OK


def cmd_session_stop(args, client: Client) -> int:
    return stopped(args, client.stop_session(args.id), "session", "stop requested")


def cmd_mcp(args) -> int:
    try:
        from klique.client.mcp_server import serve
    except ImportError as error:
        print(f"klique mcp needs {error.name}: pip install 'klique[mcp]'", file=sys.stderr)
        return USAGE
    serve()
    return OK


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")
    ca_help = (
        "a CA file (PEM) to check the server's certificate with; `klique login` stores it "
        "[KLIQUE_CA_BUNDLE; default: SSL_CERT_FILE, else the CAs shipped with certifi]"
    )
    common.add_argument("--ca-bundle", metavar="FILE", default=argparse.SUPPRESS, help=ca_help)
    root = argparse.ArgumentParser(
        prog="klique",
        description="Ask Klique for GPUs as yourself. Start with `klique login`.",
        epilog="The task's command goes after --. Exit codes: 0 ok, 1 task failed or other error, "
        "2 usage, 3 not logged in, 4 forbidden or not found, 5 input refused, 6 unreachable, "
        "7 server error, 8 task canceled, 9 wait timed out.",
    )
    root.add_argument("--ca-bundle", metavar="FILE", default=None, help=ca_help)
    commands = root.add_subparsers(dest="command_name", required=True, metavar="COMMAND")

    def command(name, handler, help_text, parent=commands, usage=None):
        sub = parent.add_parser(name, parents=[common], help=help_text, description=help_text, usage=usage)
        sub.set_defaults(handler=handler)
        return sub

    def task_template(sub, resource_nargs=None):
        sub.add_argument(
            "resource",
            metavar="RESOURCE",
            nargs=resource_nargs,
            help="compute resource name (see `klique resources`)",
        )
        sub.add_argument("--gpus", help="GPUs (per node), for a profile that takes the size from the task")
        sub.add_argument(
            "--nodes",
            type=whole_number,
            metavar="N",
            help="nodes, each with the GPUs (default 1; only where the pools run multi-node work); "
            "the task counts GPUs x nodes",
        )
        sub.add_argument("--project", help="a project of the compute resource's group")
        sub.add_argument("--checkpoint", action="store_true", help="the task checkpoints and can resume")

    def waiting(sub):
        sub.add_argument("--wait", action="store_true", help="follow the task with a live status line")
        sub.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds")
        sub.add_argument("--poll", type=float, default=2.0, help="with --wait: seconds between checks")

    login = command("login", cmd_login, "store the server URL and your personal token")
    login.add_argument("--url", help="the Klique server, e.g. https://klique.example.org")
    login.add_argument("--token", help="the token ('-' reads it from standard input); asked for if left out")
    command("resources", cmd_resources, "the compute resources you may submit to")
    submit = command(
        "submit",
        cmd_submit,
        "submit a task, or many from a file",
        usage="klique submit [options] RESOURCE -- COMMAND...\n"
        "       klique submit --from FILE [--batch N] [--json]",
    )
    task_template(submit, resource_nargs="?")
    submit.add_argument("--name", default="", help="a name for the task")
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
    command("usage", cmd_usage, "GPUs in use and GPU-hours of your groups")
    command("budget", cmd_budget, "time budgets of your groups: used, left, burn rate, run-out, reset")
    schedule = commands.add_parser("schedule", help="cron schedules that submit tasks as you")
    schedules = schedule.add_subparsers(dest="schedule_command", required=True, metavar="ACTION")
    command("ls", cmd_schedule_ls, "your schedules", schedules)
    add = command(
        "add",
        cmd_schedule_add,
        "add a schedule that submits the task at each due time",
        schedules,
        usage="klique schedule add [options] RESOURCE --cron CRON --name NAME -- COMMAND...",
    )
    add.add_argument("--cron", required=True, help="five fields, UTC, e.g. '0 2 * * *'")
    add.add_argument("--name", required=True)
    task_template(add)
    for name, handler in [
        ("pause", cmd_schedule_pause),
        ("resume", cmd_schedule_resume),
        ("rm", cmd_schedule_rm),
    ]:
        command(name, handler, f"{name} a schedule", schedules).add_argument("id", type=int)
    session = commands.add_parser("session", help="notebook and IDE sessions on GPUs")
    sessions = session.add_subparsers(dest="session_command", required=True, metavar="ACTION")
    start = command("start", cmd_session_start, "start a session on a compute resource", sessions)
    start.add_argument("resource", metavar="RESOURCE", help="compute resource name (see `klique resources`)")
    start.add_argument("--kind", help="the session kind (default: the first Jupyter kind offered)")
    start.add_argument("--gpus", help="GPUs, for a profile that takes the size from the task")
    start.add_argument("--project", help="a project of the compute resource's group")
    start.add_argument("--name", default="", help="a name for the session")
    command("ls", cmd_session_ls, "your sessions, newest first", sessions).add_argument(
        "--limit", type=int, default=50
    )
    opener = command("open", cmd_session_open, "print a session's URL and token", sessions)
    opener.add_argument("id", type=int)
    opener.add_argument("--browser", action="store_true", help="open the link in your web browser")
    opener.add_argument("--timeout", type=float, help="wait up to this many seconds for it to be ready")
    opener.add_argument("--poll", type=float, default=2.0, help="with --timeout: seconds between checks")
    command("stop", cmd_session_stop, "stop a session: its GPUs go back to the pool", sessions).add_argument(
        "id", type=int
    )
    command("mcp", cmd_mcp, "run the MCP server over stdio for an agent, acting with your token")
    from klique.client import whatif_cli  # it imports this module's helpers

    whatif_cli.register(command)
    return root


def pipe_closed() -> int:
    """The reader of standard output went away (``| head``): no traceback, and nothing more
    written there at exit (Python's own flush would complain)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    return PIPE_CLOSED


def main(argv: list[str] | None = None) -> int:
    """Everything after the first ``--`` is the task's command, passed on untouched."""
    argv = sys.argv[1:] if argv is None else list(argv)
    command = []
    if "--" in argv:
        split = argv.index("--")
        argv, command = argv[:split], argv[split + 1 :]
    args = parser().parse_args(argv)
    args.command = command
    try:
        if args.handler in (cmd_login, cmd_mcp):
            code = args.handler(args)
        else:
            with Client.from_config(channel="cli", ca_bundle=args.ca_bundle) as client:
                code = args.handler(args, client)
        sys.stdout.flush()  # a reader that went away shows here, not at exit
        return code
    except BrokenPipeError:
        return pipe_closed()
    except KliqueError as error:
        if isinstance(error, ApiError) and error.errors:
            print("klique: the server refused the input:", file=sys.stderr)
            for field, reasons in error.errors.items():
                print(f"  {field}: {' '.join(map(str, reasons))}", file=sys.stderr)
        else:
            print(f"klique: {error}", file=sys.stderr)
        return next((code for kind, code in EXIT_BY_ERROR if isinstance(error, kind)), FAILED)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
