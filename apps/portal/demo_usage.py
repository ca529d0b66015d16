"""A year of work for the demo estate at scale (``demo_large``): tasks over every team's compute
resources and their usage intervals, written with COPY on PostgreSQL (executemany batches
elsewhere), then the rollups built by the ledger's own ``rollups.refresh`` (or ``rebuild`` over
the year when rollups were built before).

A task's intervals follow each other on one pool, a few minutes apart (each one a preemption and
requeue); an interval carries its task's user, project, policy, group, compute resource, pool, GPU
type, counted GPUs and the profile's time weight, as ``apps.ledger`` records them, so reports price
them from the price list as they do any interval. Most tasks ended, some run now (one open
interval each), some wait (with a no-room verdict). Each task has its submitted, placed and final
events; preemptions and requeues have theirs only in the last fortnight (the pages' history) to
keep the event table to a few hundred thousand rows.
"""

import json
import random
import time
from collections import defaultdict
from contextlib import contextmanager
from datetime import date, datetime, timedelta
from decimal import Decimal
from itertools import islice

from django.core.management.color import no_style
from django.db import connection
from django.db.models import Max, Min

from apps.accounts.models import Membership, Project
from apps.ledger import rollups
from apps.ledger.models import UsageInterval
from apps.policies.models import ComputeResource, ProfilePool
from apps.pools.models import GpuType
from apps.pricing import services as pricing
from apps.pricing.models import Price
from apps.tasks.models import Task, TaskEvent

YEAR = timedelta(days=365)
EVENTS_SINCE = timedelta(days=14)
DEMO_SHARE = 0.1  # of the tasks, on the demo's own teams: short ones, one to three intervals
WAITING_SHARE = 0.02
RUNNING_SHARE = 0.008
BATCH = 50_000
TASK_FIELDS = (
    "id", "name", "kind", "user_id", "project_id", "compute_resource_id", "gpus", "nodes", "slots",
    "command", "spec", "channel", "state", "queue_seq", "priority", "pool_id", "stop_reason", "verdict",
    "checkpoint", "ran_s", "waits_on", "submitted_at", "placed_at", "claimed_at", "started_at",
    "ended_at", "preemption_count", "last_preemption_reason", "exit_code", "failure",
)  # fmt: skip
INTERVAL_FIELDS = (
    "task_id", "user_id", "project_id", "policy_id", "group_id", "compute_resource_id", "pool_id",
    "gpu_type_id", "gpus", "time_weight", "start", "end",
)  # fmt: skip
ENDINGS = ("succeeded",) * 16 + ("failed",) * 3 + ("canceled",)
EXIT_CODES = {"succeeded": 0, "failed": 1}
EVENT_FIELDS = ("task_id", "at", "kind", "pool_id", "reason", "actor_id", "detail")


def copy_rows(model, fields: tuple[str, ...], rows) -> int:
    """Insert ``rows`` (tuples of ``fields``, attribute names): COPY on PostgreSQL, executemany in
    batches of ``BATCH`` elsewhere (values prepared by each field). JSON values are Python objects."""
    meta, quote = model._meta, connection.ops.quote_name
    columns = [meta.get_field(f) for f in fields]
    names = ", ".join(quote(f.column) for f in columns)
    table, written = quote(meta.db_table), 0
    json_at = [n for n, f in enumerate(columns) if f.get_internal_type() == "JSONField"]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            with cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy:
                for row in rows:
                    if json_at:
                        row = list(row)
                        for n in json_at:
                            row[n] = json.dumps(row[n])
                    copy.write_row(row)
                    written += 1
            return written
        statement = f"INSERT INTO {table} ({names}) VALUES ({', '.join(['%s'] * len(columns))})"
        rows = iter(rows)
        while batch := list(islice(rows, BATCH)):
            prepared = [
                [f.get_db_prep_save(v, connection) for f, v in zip(columns, row, strict=True)]
                for row in batch
            ]
            cursor.executemany(statement, prepared)
            written += len(batch)
    return written


class Estate:
    """What the tasks are drawn from: per compute resource with a member to submit, its policy,
    group, size, time weight and pools; per team its members and projects."""

    def __init__(self):
        members, projects = defaultdict(list), defaultdict(list)
        for user_id, group_id in Membership.objects.filter(role=Membership.Role.MEMBER).values_list(
            "user_id", "group_id"
        ):
            members[group_id].append(user_id)
        for pk, group_id in Project.objects.values_list("pk", "group_id"):
            projects[group_id].append(pk)
        pools = defaultdict(list)
        links = ProfilePool.objects.order_by("profile_id", "pool_rank").values_list(
            "profile_id", "pool_id", "pool__gpu_type_id", "pool__name"
        )
        for profile_id, pool_id, gpu_type_id, name in links:
            pools[profile_id].append((pool_id, gpu_type_id, name))
        self.demo, self.other = [], []
        resources = ComputeResource.objects.select_related("policy__group", "profile").order_by("pk")
        for r in resources:
            group = r.policy.group
            if not members[group.pk] or not pools[r.profile_id]:
                continue
            row = (r, group.pk, members[group.pk], projects[group.pk] or [None], pools[r.profile_id])
            (self.other if group.slug.startswith("x-") else self.demo).append(row)


def interval_counts(rng: random.Random, tasks: int, total: int) -> list[int]:
    """``tasks`` counts of at least 1 around ``total / tasks`` that add up to ``total``."""
    mean = max(1, total // max(1, tasks))
    counts = [rng.randint(max(1, mean // 2), mean + mean // 2) for _ in range(tasks)]
    gap, n = total - sum(counts), 0
    while gap and counts:
        step = 1 if gap > 0 else -1
        if counts[n % tasks] + step >= 1:
            counts[n % tasks] += step
            gap -= step
        n += 1
    return counts


def spans(rng: random.Random, count: int, *, last_open: bool, end: datetime, start: datetime):
    """``count`` back-to-back (start, end) pairs: 5 to 35 minutes each, 1 to 9 minutes apart, the
    last ending at ``end`` (open: None) when ``last_open``, else all placed after ``start``."""
    rand = rng.random
    lengths = [(300 + int(rand() * 1800), 60 + int(rand() * 480)) for _ in range(count)]
    total = sum(a + b for a, b in lengths)
    if last_open:
        first = end - timedelta(seconds=total)
    else:
        room = max(0, int((end - start).total_seconds()) - total)
        first = start + timedelta(seconds=int(rand() * room))
    out, at = [], 0
    for length, gap in lengths:
        out.append((first + timedelta(seconds=at), first + timedelta(seconds=at + length)))
        at += length + gap
    if last_open:
        out[-1] = (out[-1][0], None)
    return out


def seed_work(tasks: int, intervals: int, *, now: datetime, rng: random.Random, out, began: float) -> dict:
    """``tasks`` tasks and ``intervals`` usage intervals over the year before ``now``; rollups."""
    prices_from_year_ago((now - YEAR).date())
    with bulk_load(Task, UsageInterval, TaskEvent):
        written = write_work(Estate(), tasks, intervals, now=now, rng=rng)
        out(f"tasks, usage intervals and events: {time.perf_counter() - began:.1f} s")
    with connection.cursor() as cursor:
        for statement in connection.ops.sequence_reset_sql(no_style(), [Task]):
            cursor.execute(statement)
    out(f"their indexes and foreign keys: {time.perf_counter() - began:.1f} s")
    written["rollups"] = build_rollups(now)
    out(f"rollups: {time.perf_counter() - began:.1f} s")
    return written


class Buffer:
    """Rows of one table, written ``BATCH`` at a time."""

    def __init__(self, model, fields: tuple[str, ...]):
        self.model, self.fields, self.rows, self.written = model, fields, [], 0

    def add(self, rows) -> None:
        self.rows += rows
        if len(self.rows) >= BATCH:
            self.flush()

    def flush(self) -> None:
        self.written += copy_rows(self.model, self.fields, self.rows)
        self.rows = []


def write_work(estate: Estate, tasks: int, intervals: int, *, now: datetime, rng: random.Random) -> dict:
    year_ago = now - YEAR
    first_id = (Task.objects.aggregate(m=Max("pk"))["m"] or 0) + 1
    demo_tasks = int(tasks * DEMO_SHARE) if estate.demo else 0
    waiting, running = int(tasks * WAITING_SHARE), int(tasks * RUNNING_SHARE)
    placed_other = tasks - demo_tasks - waiting
    demo_counts = [1 + n % 3 for n in range(demo_tasks)]
    counts = demo_counts + interval_counts(rng, placed_other, intervals - sum(demo_counts)) + [0] * waiting
    task_rows = Buffer(Task, TASK_FIELDS)
    interval_rows = Buffer(UsageInterval, INTERVAL_FIELDS)
    event_rows = Buffer(TaskEvent, EVENT_FIELDS)
    for n, count in enumerate(counts):
        pk = first_id + n
        pick = estate.demo if n < demo_tasks else estate.other
        resource, group_id, users, projects, pools = pick[(n * 7919) % len(pick)]
        profile = resource.profile
        user, project = users[n % len(users)], projects[n % len(projects)]
        pool_id, gpu_type_id, pool_name = pools[n % len(pools)]
        gpus = Decimal(1 + n % 4) if profile.size_from_task else profile.gpus
        is_running = demo_tasks + placed_other - running <= n < demo_tasks + placed_other
        end = now if is_running else now - timedelta(hours=1 + n % 24)
        runs = spans(rng, count, last_open=is_running, end=end, start=year_ago) if count else []
        submitted = runs[0][0] - timedelta(seconds=30 + n % 600) if runs else now - timedelta(minutes=n % 600)
        ended = runs[-1][1] if runs and not is_running else None
        state = _state(n, count, is_running)
        last = runs[-1][0] if runs else None
        task_rows.add([
            (pk, f"demo-{pk}", "batch", user, project, resource.pk, gpus, 1, [], f"train --step {n}", {},
             "api", state, pk, 0, pool_id if runs and state != "queued" else None,
             "canceled" if state == "canceled" else "", _waiting(pool_name) if state == "queued" else {},
             False, 0, 0, submitted, last, last, last, ended, max(0, count - 1),
             "reclaim" if count > 1 else "", EXIT_CODES.get(state), "")
        ])  # fmt: skip
        head = (pk, user, project, resource.policy_id, group_id, resource.pk, pool_id, gpu_type_id, gpus)
        interval_rows.add([(*head, profile.time_weight, start, finish) for start, finish in runs])
        event_rows.add(_events(pk, user, pool_id, submitted, runs, state, ended, now))
    for buffer in (task_rows, interval_rows, event_rows):
        buffer.flush()
    return {
        "tasks": task_rows.written,
        "usage intervals": interval_rows.written,
        "events": event_rows.written,
    }


@contextmanager
def bulk_load(*models):
    """On PostgreSQL, the tables' foreign keys and secondary indexes are dropped for the load and
    made again after it (one check and one sort each instead of one per row); elsewhere nothing."""
    if connection.vendor != "postgresql":
        yield
        return
    tables = [m._meta.db_table for m in models]
    with connection.cursor() as cursor:
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")  # the checks pending on the tables referred to
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        cursor.execute(
            "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE contype = 'f' AND conrelid::regclass::text = ANY(%s)",
            [tables],
        )
        keys = cursor.fetchall()
        cursor.execute(
            "SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid) FROM pg_index i "
            "WHERE i.indrelid::regclass::text = ANY(%s) AND NOT i.indisprimary AND NOT EXISTS "
            "(SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)",
            [tables],
        )
        indexes = cursor.fetchall()
        for table, name, _ in keys:
            cursor.execute(f'ALTER TABLE {table} DROP CONSTRAINT "{name}"')
        for name, _ in indexes:
            cursor.execute(f"DROP INDEX {name}")
    yield
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL maintenance_work_mem = '512MB'")
        for _, definition in indexes:
            cursor.execute(definition)
        for table, name, definition in keys:
            cursor.execute(f'ALTER TABLE {table} ADD CONSTRAINT "{name}" {definition}')
        cursor.execute(f"ANALYZE {', '.join(tables)}")


def _state(n: int, count: int, running: bool) -> str:
    if running:
        return "running"
    if not count:
        return "queued"
    return ENDINGS[n % len(ENDINGS)]


def _waiting(pool: str) -> dict:
    message = f"No room for its size in its pools ({pool}): their declared capacity is in use."
    return {"rule": "no_capacity", "pools": [pool], "message": message, "key": "room||||||"}


def _events(pk, user, pool, submitted, runs, state, ended, now) -> list[tuple]:
    """Submitted, placed, the final event; preempted and requeued in the last fortnight only."""
    rows = [(pk, submitted, "submitted", None, "", user, {"channel": "api"})]
    if not runs:
        return rows
    rows.append((pk, runs[0][0], "placed", pool, "", None, {}))
    for (_, end), (again, _) in zip(runs, runs[1:], strict=False):
        if end >= now - EVENTS_SINCE:
            rows.append((pk, end, "preempted", pool, "reclaim", None, {}))
            rows.append((pk, end, "requeued", pool, "reclaim", None, {}))
            rows.append((pk, again, "placed", pool, "", None, {}))
    if ended is not None:
        rows.append((pk, ended, state, pool, "canceled" if state == "canceled" else "", None, {}))
    return rows


def prices_from_year_ago(first: date) -> None:
    """The demo's first prices, in force from the first day of the year of usage too (once), so
    every interval is priced."""
    for gpu_type in GpuType.objects.all():
        earliest = Price.objects.filter(gpu_type=gpu_type, currency="EUR").order_by("effective_from").first()
        if earliest is not None and earliest.effective_from > first:
            amount = earliest.per_gpu_hour
            pricing.create_price(gpu_type=gpu_type, per_gpu_hour=amount, effective_from=first, via="system")


def build_rollups(now: datetime) -> int:
    """The ledger's own bulk rollup code over the year: ``refresh`` on a ledger never rolled up, else
    ``rebuild`` from the first interval to where it was built, then ``refresh``."""
    until = rollups.built_until()
    written = 0
    if until is not None:
        first = UsageInterval.objects.aggregate(m=Min("start"))["m"] or until
        written = rollups.rebuild(first, until, now)
    return written + rollups.refresh(now)
