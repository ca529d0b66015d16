"""``klique schedule``: cron schedules that submit tasks as the user: list, add, pause, resume,
remove."""

import sys

from klique.client.cli.exits import OK, USAGE
from klique.client.cli.inputs import priority_option, task_template, time_option
from klique.client.cli.output import show, table, when
from klique.client.sdk.client import Client


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
        priority=args.priority,
        time_limit_s=args.time_limit,
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


def register(commands, command) -> None:
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
    priority_option(add)
    time_option(add)
    for name, handler in [
        ("pause", cmd_schedule_pause),
        ("resume", cmd_schedule_resume),
        ("rm", cmd_schedule_rm),
    ]:
        command(name, handler, f"{name} a schedule", schedules).add_argument("id", type=int)
