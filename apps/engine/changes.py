"""The change log the live engine reads between passes: which tasks changed since its last load,
and whether anything else it holds did (then it reloads everything).

Database triggers write it, in the writer's own transaction, so no code path can forget to (a
bulk update, the admin, a raw statement, a migration): a row per changed task, and a row without
a task for a change to the estate (pools, cloud pools, profiles and their pool links, compute
resources, resource policies and their budget windows, groups, projects) or a deleted task.

Reading it can never miss a change, although transactions commit out of the order they started:

- PostgreSQL: each row's ``mark`` is the writing transaction's id. A load records its snapshot
  (``pg_current_snapshot()``, the repeatable-read view it read everything from); the next load
  reads the rows whose transaction that snapshot did not see (``pg_visible_in_snapshot``), and
  MVCC shows it exactly those that have committed since. Triggers are per statement, with the
  changed rows from the statement's transition table: one insert per statement.
- SQLite: one writer at a time, so the row ids are in commit order; a load records the highest.

How far a load read is its ``Position``; every change below its ``floor`` was read. What the
engine has read is deleted (``prune``) and the epoch row records how far; a process whose held
snapshot is older than that, or whose epoch row is gone (a flushed or restored database), reloads
everything.
"""

import uuid
from dataclasses import dataclass

from django.db import connection, transaction

from apps.core.sql import array_literal
from apps.engine.models import ChangeEpoch

ESTATE_TABLES = (
    "pools_pool",
    "pools_maintenancewindow",
    "cloud_cloudpool",
    "policies_profile",
    "policies_profilepool",
    "policies_computeresource",
    "policies_resourcepolicy",
    "policies_budgetwindow",
    "accounts_group",
    "accounts_project",
)
TASK_TABLE = "tasks_task"
PREFIX = "klique_engine_change"
XID = "pg_current_xact_id()::text::bigint"


@dataclass(frozen=True)
class Position:
    """How far a load read: ``token`` of the epoch it read under, ``snapshot`` (PostgreSQL) or the
    last change id (SQLite), and ``floor``: every change below it was read."""

    token: uuid.UUID
    snapshot: str
    floor: int


def _postgresql_statements() -> list[str]:
    statements = [
        f"""CREATE OR REPLACE FUNCTION {PREFIX}_task() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO engine_change (mark, task_id) SELECT {XID}, id FROM changed_rows;
            RETURN NULL;
        END $$""",
        f"""CREATE OR REPLACE FUNCTION {PREFIX}_estate() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            INSERT INTO engine_change (mark, task_id) VALUES ({XID}, NULL);
            RETURN NULL;
        END $$""",
    ]
    for event in ("INSERT", "UPDATE"):
        statements.append(
            f"CREATE TRIGGER {PREFIX}_task_{event.lower()} AFTER {event} ON {TASK_TABLE} "
            f"REFERENCING NEW TABLE AS changed_rows FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_task()"
        )
    statements.append(
        f"CREATE TRIGGER {PREFIX}_task_gone AFTER DELETE OR TRUNCATE ON {TASK_TABLE} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_estate()"
    )
    for table in ESTATE_TABLES:
        statements.append(
            f"CREATE TRIGGER {PREFIX}_{table} AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON {table} "
            f"FOR EACH STATEMENT EXECUTE FUNCTION {PREFIX}_estate()"
        )
    return statements


def _sqlite_statements() -> list[str]:
    statements = []
    for event in ("INSERT", "UPDATE"):
        statements.append(
            f"CREATE TRIGGER {PREFIX}_task_{event.lower()} AFTER {event} ON {TASK_TABLE} "
            "BEGIN INSERT INTO engine_change (mark, task_id) VALUES (0, NEW.id); END"
        )
    statements.append(
        f"CREATE TRIGGER {PREFIX}_task_gone AFTER DELETE ON {TASK_TABLE} "
        "BEGIN INSERT INTO engine_change (mark, task_id) VALUES (0, NULL); END"
    )
    for table in ESTATE_TABLES:
        for event in ("INSERT", "UPDATE", "DELETE"):
            statements.append(
                f"CREATE TRIGGER {PREFIX}_{table}_{event.lower()} AFTER {event} ON {table} "
                "BEGIN INSERT INTO engine_change (mark, task_id) VALUES (0, NULL); END"
            )
    return statements


def _statements(vendor: str) -> list[str]:
    return {"postgresql": _postgresql_statements, "sqlite": _sqlite_statements}.get(vendor, list)()


def trigger_names(vendor: str) -> set[str]:
    return {s.split()[2] for s in _statements(vendor) if s.startswith("CREATE TRIGGER")}


def install(schema_editor) -> None:
    """Create the triggers (again: each is dropped first). A later migration that changes the
    watched tables calls this again."""
    vendor = schema_editor.connection.vendor
    drop(schema_editor)
    for statement in _statements(vendor):
        schema_editor.execute(statement)


def drop(schema_editor) -> None:
    vendor = schema_editor.connection.vendor
    for statement in _statements(vendor):
        if statement.startswith("CREATE TRIGGER"):
            name, table = statement.split()[2], statement.split(" ON ")[1].split()[0]
            suffix = f" ON {table}" if vendor == "postgresql" else ""
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {name}{suffix}")


def supported() -> bool:
    """Whether this database has every trigger (a table rebuilt by a later migration on SQLite
    loses its triggers: the engine then reloads everything each pass, and says so)."""
    vendor = connection.vendor
    wanted = trigger_names(vendor)
    if not wanted:
        return False
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute(
                "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE %s", [f"{PREFIX}%"]
            )
        else:
            cursor.execute(
                "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE %s", [f"{PREFIX}%"]
            )
        return wanted <= {row[0] for row in cursor.fetchall()}


def ensure_epoch() -> None:
    """Create the epoch row when it is missing (a new or flushed database), in its own transaction."""
    if not ChangeEpoch.objects.filter(pk=1).exists():
        with transaction.atomic():
            ChangeEpoch.objects.get_or_create(pk=1, defaults={"token": uuid.uuid4()})


def position() -> Position | None:
    """Where the caller's (repeatable-read) transaction stands; None without an epoch row."""
    epoch = ChangeEpoch.objects.filter(pk=1).values_list("token", flat=True).first()
    if epoch is None:
        return None
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT snap::text, pg_snapshot_xmin(snap)::text::bigint FROM pg_current_snapshot() AS snap"
            )
            snapshot, floor = cursor.fetchone()
            return Position(epoch, snapshot, floor)
        cursor.execute("SELECT COALESCE(MAX(id), 0) FROM engine_change")
        last = cursor.fetchone()[0]
        return Position(epoch, str(last), last + 1)


def still_valid(since: Position) -> bool:
    """Whether every change after ``since`` is still in the log: the same epoch, and nothing at
    or above its floor pruned."""
    row = ChangeEpoch.objects.filter(pk=1).values_list("token", "pruned_upto").first()
    return row is not None and row[0] == since.token and row[1] <= since.floor


def since(position: Position) -> tuple[str, list]:
    """The SQL condition on ``engine_change`` for the changes a load at ``position`` did not see."""
    if connection.vendor == "postgresql":
        return (
            "mark >= %s AND NOT pg_visible_in_snapshot(mark::text::xid8, %s::pg_snapshot)",
            [position.floor, position.snapshot],
        )
    return "id > %s", [int(position.snapshot)]


def changed_tasks(position: Position, skipped: tuple[int, list[int]] | None = None) -> tuple[str, list]:
    """The SQL of the ids of the tasks changed since ``position``, less ``skipped`` (PostgreSQL:
    the id of a transaction and tasks it wrote) where one row of that transaction is a task's only
    change (``apps.engine.held``: the engine's own verdicts)."""
    condition, params = since(position)
    sql = f"SELECT task_id FROM engine_change WHERE task_id IS NOT NULL AND {condition}"
    if not skipped or not skipped[1] or connection.vendor != "postgresql":
        return sql, params
    mark, ids = skipped
    having = "NOT (count(*) = 1 AND bool_and(mark = %s) AND task_id = ANY(%s::bigint[]))"
    return f"{sql} GROUP BY task_id HAVING {having}", [*params, mark, array_literal(ids)]


def estate_changed(position: Position) -> bool:
    condition, params = since(position)
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM engine_change WHERE task_id IS NULL AND {condition} LIMIT 1", params)
        return cursor.fetchone() is not None


def prune(upto: Position) -> int:
    """Delete the changes every load from ``upto`` on has no need of, and record how far."""
    with transaction.atomic():
        column = "mark" if connection.vendor == "postgresql" else "id"
        with connection.cursor() as cursor:
            cursor.execute(f"DELETE FROM engine_change WHERE {column} < %s", [upto.floor])
            deleted = cursor.rowcount
        ChangeEpoch.objects.filter(pk=1, pruned_upto__lt=upto.floor).update(pruned_upto=upto.floor)
    return deleted
