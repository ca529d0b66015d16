"""What the CLI reads besides its words: counts typed on the command line, files (or standard
input) of tasks or changes, and the options every task template shares (``submit``, ``schedule
add``)."""

import argparse
import re
import sys

from klique.durations import DurationError, parse_duration


def whole_number(text: str) -> int:
    """A count typed on the command line: ASCII digits only (``int()`` would also take "1_0")."""
    if not re.fullmatch(r"[0-9]+", text, re.ASCII):
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    return int(text)


def priority_value(text: str) -> int | str:
    """``--priority``: a whole number (ASCII digits, optionally after -) goes as a number, anything
    else as a priority class's name; the server checks both."""
    if re.fullmatch(r"-?[0-9]+", text, re.ASCII):
        return int(text)
    if not text.strip():
        raise argparse.ArgumentTypeError("give a whole number or a priority class's name")
    return text.strip()


def priority_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--priority",
        type=priority_value,
        metavar="VALUE",
        help="a whole number or a priority class's name (e.g. low, normal, high): higher is placed "
        "first within the group's queue; default: the compute resource's, at most its maximum",
    )


def duration(text: str) -> int:
    """``--time``: a duration ("2h30m", "90m", "2:30:00") or whole seconds ("3600")."""
    try:
        return parse_duration(text)
    except DurationError as error:
        raise argparse.ArgumentTypeError(str(error)) from error


def task_ids(text: str) -> list[int]:
    """``--after-ok 12,15``: task ids separated by commas (the option may also repeat)."""
    words = [word.strip() for word in text.split(",")]
    if not all(re.fullmatch(r"[0-9]+", word, re.ASCII) for word in words):
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of task ids (e.g. 12 or 12,15)")
    return [int(word) for word in words]


def time_option(sub: argparse.ArgumentParser) -> None:
    sub.add_argument(
        "--time",
        dest="time_limit",
        type=duration,
        metavar="DURATION",
        help="time limit: running time after which the work is stopped and ends timed_out, e.g. "
        "2h30m, 90m, 2:30:00 or 3600 (seconds); default: the compute resource's, at most its maximum",
    )


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


def task_template(sub: argparse.ArgumentParser, resource_nargs=None) -> None:
    """The task's fields: its compute resource, GPUs, nodes, project and checkpointing."""
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


def waiting(sub: argparse.ArgumentParser) -> None:
    """``--wait`` and how to wait: follow the task to its end."""
    sub.add_argument("--wait", action="store_true", help="follow the task with a live status line")
    sub.add_argument("--timeout", type=float, help="with --wait: give up after this many seconds")
    sub.add_argument("--poll", type=float, default=2.0, help="with --wait: seconds between checks")
