"""Time-budget arithmetic, exact in integers.

A budget unit is one milli-weight for one microsecond: one hour of a task on a profile of
weight 1 costs `UNITS_PER_HOUR` = 1000 x 3,600,000,000 units. Hours appear only at the edges
(input and display). Usage comes from intervals (start, end or None while running), clipped to
the period and minus the windows in which the engine was disabled; never from tick counters.

Periods follow the UTC calendar: a day from midnight, a week from Monday, a month from the 1st.

Money budgets are exact integers too. A pool's rate is its price per GPU-hour in micro-units of
the budget's currency (`price_to_rate`: 2.50 EUR -> 2,500,000); a task's money rate on a pool is
its size in milli-GPUs x that rate, and a money unit is one such rate for one microsecond: one
currency unit is `MONEY_UNITS` = 1000 x 1,000,000 x 3,600,000,000 units (one GPU for one hour at a
price of 1). A money window's label is "<period> <amount> <currency>" ("month 500.00 EUR").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

US_PER_S = 1_000_000
UNITS_PER_HOUR = 1000 * 3600 * US_PER_S
MICRO = 1_000_000
MONEY_UNITS = UNITS_PER_HOUR * MICRO

Window = tuple[datetime, datetime | None]


@dataclass(frozen=True, slots=True)
class UsageInterval:
    """A task's time on a pool at a profile's milli-weight; `end` None while it runs."""

    start: datetime
    end: datetime | None
    weight: int


@dataclass(frozen=True, slots=True)
class SpendInterval:
    """A task's time on a pool at its size (milli-GPUs); `end` None while it runs."""

    start: datetime
    end: datetime | None
    size: int
    pool: str


def hours_to_units(hours: int | float | Decimal | Fraction | str) -> int:
    """Budget hours to units, rounded to the nearest unit (exact for decimal input)."""
    if isinstance(hours, str | float):
        hours = Decimal(str(hours))
    return round(Fraction(hours) * UNITS_PER_HOUR)


def units_to_hours(units: int) -> float:
    return units / UNITS_PER_HOUR


def price_to_rate(price: int | Decimal | Fraction | str) -> int:
    """A price per GPU-hour to a pool's rate in micro-units, rounded to the nearest (half even)."""
    return round(Fraction(Decimal(price) if isinstance(price, str) else price) * MICRO)


def money_to_units(amount: int | Decimal | Fraction | str) -> int:
    """An amount of money to money units, rounded to the nearest unit (exact for decimal input)."""
    return round(Fraction(Decimal(amount) if isinstance(amount, str) else amount) * MONEY_UNITS)


def units_to_money(units: int) -> Decimal:
    """Money units to an amount, to the micro-unit (half even)."""
    return Decimal(round(Fraction(units, MONEY_UNITS) * MICRO)) / MICRO


def money_label(period: str, limit: int, currency: str) -> str:
    """A money window's label: "month 500.00 EUR" (the amount to the cent)."""
    return f"{period} {units_to_money(limit).quantize(Decimal('0.01'))} {currency}"


def window_period(window: str) -> str:
    """The period of a window's label: a time window's label is its period."""
    return window.split(" ", 1)[0]


def period_bounds(now: datetime, period: str) -> tuple[datetime, datetime]:
    """The UTC calendar period holding `now`: [start, end)."""
    now = now.astimezone(UTC)
    day = now.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "day":
        return day, day + timedelta(days=1)
    if period == "week":
        start = day - timedelta(days=day.weekday())
        return start, start + timedelta(days=7)
    if period == "month":
        start = day.replace(day=1)
        end = (
            start.replace(year=start.year + 1, month=1)
            if start.month == 12
            else start.replace(month=start.month + 1)
        )
        return start, end
    raise ValueError(f"unknown budget period {period!r}")


def us_between(start: datetime, end: datetime) -> int:
    """Whole microseconds from start to end (datetimes are exact to the microsecond)."""
    return (end - start) // timedelta(microseconds=1)


def charged_us(start: datetime, end: datetime, disabled: Sequence[Window] = ()) -> int:
    """Microseconds in [start, end) outside the disabled windows (an open window runs to `end`)."""
    if end <= start:
        return 0
    total = us_between(start, end)
    for w_start, w_end in disabled:
        lo = max(start, w_start)
        hi = min(end, w_end or end)
        if hi > lo:
            total -= us_between(lo, hi)
    return total


def budget_used(
    intervals: Iterable[UsageInterval], now: datetime, period: str, disabled: Sequence[Window] = ()
) -> int:
    """Budget units used in the period holding `now`, up to `now`."""
    start, _ = period_bounds(now, period)
    total = 0
    for iv in intervals:
        if iv.weight:
            total += iv.weight * charged_us(max(iv.start, start), min(iv.end or now, now), disabled)
    return total


def money_used(
    intervals: Iterable[SpendInterval],
    now: datetime,
    period: str,
    rates: dict[str, int],
    disabled: Sequence[Window] = (),
) -> int:
    """Money units spent in the period holding `now`, up to `now`, at `rates` (pool -> rate; a
    pool without a rate costs nothing)."""
    start, _ = period_bounds(now, period)
    total = 0
    for iv in intervals:
        rate = rates.get(iv.pool, 0) * iv.size
        if rate:
            total += rate * charged_us(max(iv.start, start), min(iv.end or now, now), disabled)
    return total


def burn_rate(intervals: Iterable[UsageInterval], now: datetime) -> int:
    """Budget milli-hours per hour now: the sum of the weights of the intervals running at `now`."""
    return sum(iv.weight for iv in intervals if iv.start <= now and (iv.end is None or iv.end > now))


def projected_run_out(limit: int, used: int, rate: int, now: datetime) -> datetime | None:
    """When a budget runs out at a burn rate of `rate` milli-weights; None if it never does."""
    if used >= limit:
        return now
    if rate <= 0:
        return None
    return now + timedelta(microseconds=-(-(limit - used) // rate))
