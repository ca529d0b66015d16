"""Hourly and daily rollups of the usage ledger.

Each usage interval is cut at UTC hour boundaries; each piece adds its GPU-microseconds (milli-GPUs
x milliseconds) and budget-microseconds (milli time weight x milliseconds) to the row of its hour,
policy, group, user, project, pool and GPU type. Time is counted in whole milliseconds: an
interval's start and end are truncated to the millisecond, so its pieces add up to exactly its
length. Running intervals count up to the end of the last closed hour. A day's rows are the sums
of its 24 hourly rows, with the user and project (``DailyRollup``) and without (``DailyGroupRollup``).

``refresh(now)`` (the Celery task ``klique.ledger.rollup``) keeps the tables current; ``rebuild``
(the ``rollup_usage`` command) recomputes any range. Both are idempotent: a range is deleted and
recomputed from the intervals in one transaction, under a lock.
"""

from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from itertools import islice

from django.db import connection, transaction
from django.db.models import Min, Q, Sum
from django.db.models.functions import TruncDate
from django.utils import timezone

from apps.core.gpus import to_milli
from apps.ledger.models import DailyGroupRollup, DailyRollup, HourlyRollup, RollupState, UsageInterval

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MILLISECOND = timedelta(milliseconds=1)
HOUR_MS = 3_600_000
US_PER_HOUR = 3_600_000_000  # GPU-microseconds in a GPU-hour (and budget-microseconds in a budget hour)
KEY_FIELDS = ("policy_id", "group_id", "user_id", "project_id", "agent_id", "pool_id", "gpu_type_id")
GROUP_KEY_FIELDS = ("policy_id", "group_id", "pool_id", "gpu_type_id")
LOOKBACK = timedelta(hours=1)  # a refresh recomputes the last built hour too: late commits land there
LOCK_KEY = 0x6B6C6472  # "kldr"
BATCH = 20_000


def to_ms(moment: datetime) -> int:
    return (moment - EPOCH) // MILLISECOND


def from_ms(ms: int) -> datetime:
    return EPOCH + timedelta(milliseconds=ms)


def floor_hour(moment: datetime) -> datetime:
    ms = to_ms(moment)
    return from_ms(ms - ms % HOUR_MS)


def ceil_hour(moment: datetime) -> datetime:
    return from_ms(-(-to_ms(moment) // HOUR_MS) * HOUR_MS)


def overlapping(intervals, start: datetime, end: datetime):
    """The intervals of a queryset that overlap [start, end), running ones included."""
    return intervals.filter(start__lt=end).filter(Q(end__isnull=True) | Q(end__gt=start))


def hourly_usage(rows: Iterable, start_ms: int, end_ms: int) -> Iterator[tuple[int, tuple, int, int]]:
    """Cut interval rows ``(start, end, gpus, time_weight, *key)``, in order of start, at UTC hours
    inside [start_ms, end_ms), running ones (end None) up to end_ms.

    Yields ``(hour_ms, key, gpu_us, budget_us)`` summed per hour and key. An hour is yielded as soon
    as the rows have moved past it, so memory holds only the hours still open to later rows.
    """
    pending: dict[int, dict[tuple, list[int]]] = {}
    flushed = start_ms - start_ms % HOUR_MS
    for begin, finish, gpus, weight, *key in rows:
        lo = max(to_ms(begin), start_ms)
        hi = min(end_ms if finish is None else to_ms(finish), end_ms)
        while flushed < lo - lo % HOUR_MS:
            for sums_key, (gpu, budget) in pending.pop(flushed, {}).items():
                yield flushed, sums_key, gpu, budget
            flushed += HOUR_MS
        if hi <= lo:
            continue
        milli_gpus, milli_weight, key = to_milli(gpus), to_milli(weight), tuple(key)
        hour = lo - lo % HOUR_MS
        while hour < hi:
            ms = min(hi, hour + HOUR_MS) - max(lo, hour)
            sums = pending.setdefault(hour, {}).setdefault(key, [0, 0])
            sums[0] += ms * milli_gpus
            sums[1] += ms * milli_weight
            hour += HOUR_MS
    for hour in sorted(pending):
        for sums_key, (gpu, budget) in pending[hour].items():
            yield hour, sums_key, gpu, budget


def _write(model, fields: tuple[str, ...], rows: Iterable[tuple]) -> int:
    """Insert rows in batches: COPY on PostgreSQL, bulk inserts elsewhere. Batches let the rows
    come from a server-side cursor on the same connection."""
    meta = model._meta
    columns = ", ".join(connection.ops.quote_name(meta.get_field(f).column) for f in fields)
    statement = f"COPY {connection.ops.quote_name(meta.db_table)} ({columns}) FROM STDIN"
    written, rows = 0, iter(rows)
    while batch := list(islice(rows, BATCH)):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor, cursor.cursor.copy(statement) as copy:
                for row in batch:
                    copy.write_row(row)
        else:
            model.objects.bulk_create([model(**dict(zip(fields, row, strict=True))) for row in batch])
        written += len(batch)
    return written


def _lock() -> None:
    """Rollup writes take turns across processes (SQLite's write transactions already do)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LOCK_KEY])


def _sum_into(model, key: tuple[str, ...], rows) -> int:
    """Write the sums of the rollup rows ``rows``, grouped by ``key``, into ``model``."""
    sums = rows.values(*key).annotate(gpu=Sum("gpu_us"), budget=Sum("budget_us")).order_by()
    values = ((*(row[f] for f in key), row["gpu"], row["budget"]) for row in sums.iterator())
    return _write(model, (*key, "gpu_us", "budget_us"), values)


def _rebuild_days(first, last) -> int:
    """Recompute the daily rows of the days in [first, last) from their hourly rows, then the
    daily rows without user and project from those."""
    days = {"day__gte": first, "day__lt": last}
    DailyRollup.objects.filter(**days).delete()
    DailyGroupRollup.objects.filter(**days).delete()
    start = datetime.combine(first, datetime.min.time(), tzinfo=UTC)
    end = datetime.combine(last, datetime.min.time(), tzinfo=UTC)
    hours = HourlyRollup.objects.filter(hour__gte=start, hour__lt=end).annotate(day=TruncDate("hour"))
    written = _sum_into(DailyRollup, ("day", *KEY_FIELDS), hours)
    return written + _sum_into(
        DailyGroupRollup, ("day", *GROUP_KEY_FIELDS), DailyRollup.objects.filter(**days)
    )


def _rebuild(start: datetime, end: datetime, closed_until: datetime) -> tuple[int, list[int]]:
    """Recompute the hourly rows of the whole hours [start, end) and the daily rows of the days that
    [start, end) touches and that have closed by ``closed_until`` (a day whose end is mid-range is
    summed again from its hourly rows, old and new). Returns the rows written and the ids of the
    intervals still running."""
    HourlyRollup.objects.filter(hour__gte=start, hour__lt=end).delete()
    running: list[int] = []
    intervals = (
        overlapping(UsageInterval.objects.all(), start, end)
        .order_by("start")
        .values_list("pk", "start", "end", "gpus", "time_weight", *KEY_FIELDS)
    )

    def rows():
        for pk, *row in intervals.iterator(chunk_size=BATCH):
            if row[1] is None:
                running.append(pk)
            yield row

    hourly = (
        (from_ms(hour), *key, gpu, budget)
        for hour, key, gpu, budget in hourly_usage(rows(), to_ms(start), to_ms(end))
    )
    written = _write(HourlyRollup, ("hour", *KEY_FIELDS, "gpu_us", "budget_us"), hourly)
    touched_until = end.date() if end.time() == datetime.min.time() else end.date() + timedelta(days=1)
    written += _rebuild_days(start.date(), min(touched_until, closed_until.date()))
    return written, running


def rebuild(start: datetime, end: datetime, now: datetime | None = None) -> int:
    """Recompute the rollups of the closed hours that [start, end) touches; returns rows written."""
    now = now or timezone.now()
    until = floor_hour(now)
    start, end = floor_hour(start), min(ceil_hour(end), until)
    if end <= start:
        return 0
    with transaction.atomic():
        _lock()
        return _rebuild(start, end, until)[0]


def _refresh_start(state: RollupState, until: datetime) -> datetime:
    if state.built_until is None:
        first = UsageInterval.objects.aggregate(first=Min("start"))["first"]
        return floor_hour(first) if first else until
    start = state.built_until - LOOKBACK
    # By primary key, then min() here: MIN(end) in SQL would walk the whole index on end.
    closed = UsageInterval.objects.filter(pk__in=state.open_interval_ids, end__isnull=False)
    ends = closed.order_by().values_list("end")
    return min([start, *(floor_hour(end) for (end,) in ends)])


def refresh(now: datetime | None = None) -> int:
    """Bring the rollups up to the last closed hour before ``now``; returns rows written.

    It recomputes from the last built hour (or from the first interval, the first time), and from
    the end of any interval that was running at the last refresh and has been closed since.
    """
    now = now or timezone.now()
    until = floor_hour(now)
    with transaction.atomic():
        _lock()
        state, _ = RollupState.objects.get_or_create(pk=1)
        start = _refresh_start(state, until)
        written = 0
        if start < until:
            written, state.open_interval_ids = _rebuild(start, until, until)
        state.built_until = max(until, state.built_until) if state.built_until else until
        state.refreshed_at = now
        state.save()
    return written


def built_until() -> datetime | None:
    """Where the rollups end: reports read the intervals from here on."""
    return RollupState.objects.values_list("built_until", flat=True).first()
