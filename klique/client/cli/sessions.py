"""``klique session``: notebook and IDE sessions on GPUs: start, list, open (URL and token) and
stop."""

import sys
import time
import webbrowser

from klique.client.cli.exits import FAILED, OK, TIMED_OUT
from klique.client.cli.output import REASONS, amount, describe, show, stopped, table, when
from klique.client.sdk.client import Client
from klique.client.sdk.tasks import Task


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


def cmd_session_share(args, client: Client) -> int:
    users = (
        client.share_session(args.id, args.users)
        if args.users or args.nobody
        else client.session_shared_with(args.id)
    )
    show(args, {"users": users}, f"Shared with  {', '.join(users) or 'no one'}")
    return OK


def register(commands, command) -> None:
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
    share = command(
        "share", cmd_session_share, "who else may open your session (through the gateway)", sessions
    )
    share.add_argument("id", type=int)
    share.add_argument("users", nargs="*", metavar="USER", help="usernames; none: show the list")
    share.add_argument("--nobody", action="store_true", help="share it with no one")
    command("stop", cmd_session_stop, "stop a session: its GPUs go back to the pool", sessions).add_argument(
        "id", type=int
    )
