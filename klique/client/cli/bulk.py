"""``klique submit --from FILE``: many tasks from a JSON array or JSON lines, submitted in
batches, each all or none."""

import json
import sys

from klique import numbers
from klique.client.cli.exits import INVALID, OK
from klique.client.cli.inputs import BadInput, read_text
from klique.client.cli.output import show
from klique.client.sdk.client import Client
from klique.client.sdk.errors import InvalidRequest
from klique.client.sdk.tasks import Task


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
            before = numbers.plural(len(created), "task")
            print(
                f"klique: the server refused the input ({before} submitted before):",
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
