"""The two statements of every heartbeat: the write of the worker's row and the read of its
active tasks. On PostgreSQL the SQL is written out (the ORM took longer to build them than
PostgreSQL took to answer: docs/benchmarks.md, "Worker sync at 2,000 daemons"); elsewhere
(SQLite, whose writers are serialised) the ORM."""

from datetime import datetime
from decimal import Decimal

from django.db import connection

from apps.pools.models import Worker
from apps.tasks.models import Task

_WORKERS, _TASKS = Worker._meta, Task._meta
# In the ORM's order (Task's ``ordering``), though the callers keep them by id.
HELD_SQL = (
    f"SELECT id, state, claimed_at FROM {_TASKS.db_table} WHERE worker_id = %s"
    f" AND state IN ({', '.join(['%s'] * len(Task.ACTIVE_STATES))}) ORDER BY id DESC"
)
ALIVE_SQL = (
    f"UPDATE {_WORKERS.db_table} AS w SET {{assignments}} FROM (SELECT id, state, gpus FROM"
    f" {_WORKERS.db_table} WHERE id = %s AND state <> %s FOR NO KEY UPDATE) AS was WHERE w.id = was.id"
    " RETURNING was.state, was.gpus"
)
_statements: dict[tuple[str, ...], tuple[str, list]] = {}


def held(worker_id: int) -> dict[int, tuple[str, datetime | None]]:
    """The worker's active tasks: their state and claim time, by id."""
    if connection.vendor != "postgresql":
        active = Task.objects.filter(worker_id=worker_id, state__in=Task.ACTIVE_STATES)
        return {pk: (state, at) for pk, state, at in active.values_list("pk", "state", "claimed_at")}
    with connection.cursor() as cursor:
        cursor.execute(HELD_SQL, [worker_id, *Task.ACTIVE_STATES])
        return {pk: (state, at) for pk, state, at in cursor.fetchall()}


def _alive_statement(names: tuple[str, ...]) -> tuple[str, list]:
    """The update of these fields, and their model fields, built once per set of fields."""
    found = _statements.get(names)
    if found is None:
        columns = [_WORKERS.get_field(name) for name in names]
        assignments = ", ".join(f"{connection.ops.quote_name(column.column)} = %s" for column in columns)
        found = _statements[names] = (ALIVE_SQL.format(assignments=assignments), columns)
    return found


def write_alive(worker_id: int, fields: dict) -> tuple[str, Decimal] | None:
    """Write ``fields`` to the worker's row unless it is retired; its state and GPUs as they were
    (None when retired or gone). The caller's ``Worker`` may be the token cache's, up to
    ``WORKER_CACHE_S`` old: what was, is read here, from the row this statement locks.

    On PostgreSQL one statement (a lock-reading sub-select and the update); elsewhere a read, then
    the update."""
    if connection.vendor != "postgresql":
        live = Worker.objects.filter(pk=worker_id).exclude(state=Worker.State.RETIRED)
        before = live.values_list("state", "gpus").first()
        return before if before is not None and live.update(**fields) else None
    sql, columns = _alive_statement(tuple(fields))
    values = [column.get_db_prep_save(fields[column.name], connection) for column in columns]
    with connection.cursor() as cursor:
        cursor.execute(sql, [*values, worker_id, Worker.State.RETIRED])
        return cursor.fetchone()
