"""Closed months as reports read them (``apps.ledger.closing`` writes them).

A report splices each closed month into its reading: the month's price segments are the price
list frozen at the close, and a month the report covers whole is read from its ``FrozenUsage``
rows instead of the rollups and intervals. A month covered in part is read from the ledger at the
frozen prices. Adjustments booked in the report's months follow the total.
"""

from dataclasses import replace
from datetime import date, datetime
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q, Sum

from apps.accounts.selectors import managed_group_ids, subtree_ids
from apps.ledger import usage
from apps.ledger.models import Adjustment, FrozenUsage, MonthClose
from apps.pricing.selectors import Segment, midnight, price_segments


def month_after(day: date) -> date:
    return date(day.year + day.month // 12, day.month % 12 + 1, 1)


def month_bounds(month: date) -> tuple[datetime, datetime]:
    """[start, end) of the UTC month holding ``month``."""
    first = month.replace(day=1)
    return midnight(first), midnight(month_after(first))


def closes_in_force(start: datetime | None = None, end: datetime | None = None) -> list[MonthClose]:
    """The closes in force (not reopened) of the months that meet [start, end), oldest first."""
    closes = MonthClose.objects.filter(reopened_at__isnull=True)
    if start is not None:
        closes = closes.filter(month__gte=start.date().replace(day=1))
    if end is not None:
        closes = closes.filter(month__lt=_first_day_from(end))
    return list(closes.order_by("month"))


def _first_day_from(moment: datetime) -> date:
    """The first day that starts at or after ``moment``."""
    day = moment.date()
    return day if moment == midnight(day) else date.fromordinal(day.toordinal() + 1)


def closed_months() -> set[date]:
    return set(MonthClose.objects.filter(reopened_at__isnull=True).values_list("month", flat=True))


def next_open_month(after: date) -> date:
    """The first month after ``after`` that is not closed: where its adjustments are booked."""
    closed, month = closed_months(), month_after(after)
    while month in closed:
        month = month_after(month)
    return month


def frozen_segments(close: MonthClose, currency: str) -> list[Segment] | None:
    entries = close.prices.get(currency)
    if entries is None:
        return None
    return [
        Segment(
            entry["gpu_type"],
            datetime.fromisoformat(entry["start"]),
            datetime.fromisoformat(entry["end"]),
            None if entry["per_gpu_hour"] is None else Decimal(entry["per_gpu_hour"]),
        )
        for entry in entries
    ]


def report_segments(currency: str, start: datetime, stop: datetime) -> list[Segment]:
    """The price segments of a report: today's price list, except in closed months, whose frozen
    price list replaces it. Per GPU type, contiguous and in time order, like ``price_segments``."""
    live = price_segments(currency, start, stop)
    closes = closes_in_force(start, stop)
    if not closes or start >= stop:
        return live
    by_type: dict[int, list[Segment]] = {}
    for segment in live:
        by_type.setdefault(segment.gpu_type_id, []).append(segment)
    for close in closes:
        frozen = frozen_segments(close, currency)
        if frozen is None:
            continue
        month_start, month_end = month_bounds(close.month)
        low, high = max(month_start, start), min(month_end, stop)
        if low >= high:
            continue
        for gpu_type_id, pieces in by_type.items():
            inside = [
                replace(s, start=max(s.start, low), end=min(s.end, high))
                for s in frozen
                if s.gpu_type_id == gpu_type_id and s.start < high and s.end > low
            ]
            if not inside:
                continue
            before = [replace(s, end=min(s.end, low)) for s in pieces if s.start < low]
            after = [replace(s, start=max(s.start, high)) for s in pieces if s.end > high]
            by_type[gpu_type_id] = before + inside + after
    return [segment for pieces in by_type.values() for segment in pieces]


def usage_by(
    names, where: Q, start: datetime, stop: datetime, segments: list[Segment], rolled, currency: str
):
    """``usage.usage_by`` with closed months read from their frozen rows: the months that
    [start, stop) covers whole and that were frozen in ``currency``."""
    whole = []
    for close in closes_in_force(start, stop):
        month_start, month_end = month_bounds(close.month)
        if start <= month_start and month_end <= stop and currency in close.prices:
            whole.append((month_start, month_end, close))
    spans, cursor = [], start
    for month_start, month_end, _ in whole:
        if cursor < month_start:
            spans.append((cursor, month_start))
        cursor = month_end
    if cursor < stop:
        spans.append((cursor, stop))
    sums = None
    for low, high in spans:
        found = usage.usage_by(names, where, low, high, segments, rolled)
        if sums is None:
            sums = found
        else:
            for key, (gpu, budget) in found.items():
                entry = sums[key]
                entry[0] += gpu
                entry[1] += budget
    if sums is None:
        sums = usage.usage_by(names, where, stop, stop, segments, rolled)
    index = {(s.gpu_type_id, s.start): i for i, s in enumerate(segments)}
    for _, _, close in whole:
        rows = (
            FrozenUsage.objects.filter(where, close=close, currency=currency)
            .values(*names, "gpu_type_id", "segment_start")
            .annotate(gpu=Sum("gpu_us"), budget=Sum("budget_us"))
            .order_by()
        )
        for row in rows:
            entry = sums[(tuple(row[n] for n in names), index[(row["gpu_type_id"], row["segment_start"])])]
            entry[0] += row["gpu"]
            entry[1] += row["budget"]
    return sums


def adjustments(viewer, spec) -> list[Adjustment]:
    """The adjustments booked in the months whose first day falls in the report's range that the
    viewer may see and the report's filters keep. Adjustments are per group, project and GPU
    type: a report filtered by user or pool has none."""
    if spec.user is not None or spec.pool is not None:
        return []
    found = Adjustment.objects.filter(
        voided_at__isnull=True,
        currency=spec.currency,
        booked_in__gte=spec.start.date(),
        booked_in__lt=_first_day_from(spec.end),
    ).select_related("group", "project", "gpu_type", "actor")
    found = [a for a in found if spec.start <= midnight(a.booked_in)]
    managed = managed_group_ids(viewer)
    if managed is not None:
        found = [a for a in found if a.group_id in managed]
    if spec.group is not None:
        tree = subtree_ids([spec.group.pk])
        found = [a for a in found if a.group_id in tree]
    if spec.project is not None:
        found = [a for a in found if a.project_id == spec.project.pk]
    if spec.gpu_type is not None:
        found = [a for a in found if a.gpu_type_id == spec.gpu_type.pk]
    return found


def adjustment_cost(adjustment: Adjustment) -> Fraction:
    return Fraction(int(adjustment.cost_units), usage.MONEY_DENOMINATOR)


def may_close_months(user) -> bool:
    """IT and finance at the organisation's root close and reopen months (and look for late
    corrections): a close freezes the whole estate's month, so finance of a business unit does not."""
    from apps.accounts.models import Membership
    from apps.accounts.selectors import has_estate_role

    return has_estate_role(user, Membership.Role.FINANCE, Membership.Role.IT_ADMIN)


def month_states(now: datetime, count: int = 12) -> list[dict]:
    """The current month and the ``count`` before it, newest first: each with its close in force
    (or None), whether it has ended, and whether it is the latest closed month (reopenable)."""
    month = now.date().replace(day=1)
    months = [month]
    for _ in range(count):
        month = date(month.year - (month.month == 1), (month.month - 2) % 12 + 1, 1)
        months.append(month)
    in_force = MonthClose.objects.filter(reopened_at__isnull=True, month__in=months)
    closes = {c.month: c for c in in_force.select_related("closed_by")}
    latest = MonthClose.objects.filter(reopened_at__isnull=True).order_by("-month").first()
    return [
        {
            "month": m,
            "close": closes.get(m),
            "ended": month_bounds(m)[1] <= now,
            "reopenable": latest is not None and closes.get(m) == latest,
        }
        for m in months
    ]
