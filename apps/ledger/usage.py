"""Reading the ledger: the usage in a range as exact sums per key and price segment.

Whole days come from the daily rollups, the hours around them from the hourly rollups and only
the rest (normally the current, open hour) from the usage intervals. Sums stay integers
(GPU-microseconds); ``PRICE_SCALE`` and ``MONEY_DENOMINATOR`` price them exactly. Closed months
are spliced in by ``apps.ledger.closed.usage_by``.
"""

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db.models import Q, Sum
from django.db.models.functions import TruncDate

from apps.ledger.models import DailyGroupRollup, DailyRollup, HourlyRollup, UsageInterval
from apps.ledger.rollups import US_PER_HOUR, from_ms, hourly_usage, overlapping, to_ms
from apps.pricing.selectors import Segment, midnight

PRICE_SCALE = 10**4  # prices have four decimals
MONEY_DENOMINATOR = US_PER_HOUR * PRICE_SCALE
DAY = "day"  # a name ``usage_by`` keys on besides the columns: the UTC day of the usage


def _segment_filters(segments: list[Segment], field_name: str, by_day: bool) -> list[Q]:
    """The rollup rows of each price segment: its GPU type, from its start, until its end. Inner
    bounds are price changes, at midnight UTC, so they hold for daily rows too."""
    first, last = {}, {}
    for i, segment in enumerate(segments):
        first.setdefault(segment.gpu_type_id, i)
        last[segment.gpu_type_id] = i
    filters = []
    for i, segment in enumerate(segments):
        condition = Q(gpu_type_id=segment.gpu_type_id)
        if i != first[segment.gpu_type_id]:
            condition &= Q(**{f"{field_name}__gte": segment.start.date() if by_day else segment.start})
        if i != last[segment.gpu_type_id]:
            condition &= Q(**{f"{field_name}__lt": segment.end.date() if by_day else segment.end})
        filters.append(condition)
    return filters


def _fields_of(where: Q) -> set[str]:
    names = set()
    for child in where.children:
        names |= _fields_of(child) if isinstance(child, Q) else {child[0].split("__")[0]}
    return names


def _segment_of(segments: list[Segment]):
    by_type: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for i, segment in enumerate(segments):
        by_type[segment.gpu_type_id].append((to_ms(segment.end), i))

    def lookup(gpu_type_id: int, hour_ms: int) -> int:
        return next((i for end, i in by_type.get(gpu_type_id, []) if hour_ms < end), -1)

    return lookup


def _parts(start: datetime, stop: datetime, rolled: datetime | None, daily):
    """Split [start, stop) into rollup reads (model, period field, low, high) and the tail that
    is read from the intervals. Whole days come from ``daily``."""
    rolled_end = max(start, min(stop, rolled)) if rolled else start
    first_day = midnight(start.date()) + (
        timedelta(days=1) if start.time() != datetime.min.time() else timedelta()
    )
    last_day = midnight(rolled_end.date())
    if first_day < last_day:
        reads = [
            (HourlyRollup, "hour", start, first_day),
            (daily, "day", first_day.date(), last_day.date()),
            (HourlyRollup, "hour", last_day, rolled_end),
        ]
    else:
        reads = [(HourlyRollup, "hour", start, rolled_end)]
    return [r for r in reads if r[2] < r[3]], (rolled_end, stop)


def usage_by(names: list[str], where: Q, start: datetime, stop: datetime, segments: list[Segment], rolled):
    """{(values of ``names``, price segment index): [gpu_us, budget_us]} of the usage in
    [start, stop), from the rollups up to ``rolled`` and from the intervals after it.

    Whole days come from the daily rows without user and project when neither ``names`` nor
    ``where`` needs them. Rollup rows are grouped by ``names`` alone, with one filtered sum per
    price segment, so the database groups on plain columns (and plans for the real number of
    groups). With ``DAY`` among ``names`` the sums are per UTC day too."""
    sums: dict[tuple, list[int]] = defaultdict(lambda: [0, 0])
    needs_user = {"user_id", "project_id", "agent_id"} & ({*names} | _fields_of(where))
    reads, (live_start, live_stop) = _parts(
        start, stop, rolled, DailyRollup if needs_user else DailyGroupRollup
    )
    for model, field_name, low, high in reads:
        sums_per_segment = {}
        for i, condition in enumerate(_segment_filters(segments, field_name, by_day=field_name == "day")):
            sums_per_segment[f"gpu_{i}"] = Sum("gpu_us", filter=condition)
            sums_per_segment[f"budget_{i}"] = Sum("budget_us", filter=condition)
        rows = model.objects.filter(where, **{f"{field_name}__gte": low, f"{field_name}__lt": high})
        if DAY in names and field_name == "hour":
            rows = rows.annotate(**{DAY: TruncDate("hour", tzinfo=UTC)})
        rows = rows.values(*names).annotate(**sums_per_segment).order_by()
        for row in rows:
            key = tuple(row[n] for n in names)
            for i in range(len(segments)):
                if row[f"gpu_{i}"] is not None:
                    entry = sums[(key, i)]
                    entry[0] += row[f"gpu_{i}"]
                    entry[1] += row[f"budget_{i}"]
    if live_start < live_stop:
        segment_of = _segment_of(segments)
        columns = [n for n in names if n != DAY]
        intervals = (
            overlapping(UsageInterval.objects.filter(where), live_start, live_stop)
            .order_by("start")
            .values_list("start", "end", "gpus", "time_weight", "gpu_type_id", *columns)
        )
        # A plain fetch (the open hour is small) lets the database plan for all of its rows.
        pieces = hourly_usage(list(intervals), to_ms(live_start), to_ms(live_stop))
        for hour, (gpu_type_id, *key), gpu, budget in pieces:
            if DAY in names:
                key.insert(names.index(DAY), from_ms(hour).date())
            entry = sums[(tuple(key), segment_of(gpu_type_id, hour))]
            entry[0] += gpu
            entry[1] += budget
    return sums
