"""Closing months, reopening them, and the adjustments that keep closed months closed.

* **Close**: finance or IT closes a UTC month once it has ended. For every currency with prices,
  the month's usage (per group, user, project, pool, GPU type and price segment) and the price
  list in force are frozen; reports read these rows from then on (``apps.ledger.closed``).
* **Adjustments**, computed when something can change a closed month: at once after a price
  change whose time reaches into a closed month (``apps.pricing.services`` calls
  ``price_changed``), and, for late usage corrections, before every close and whenever finance
  asks (``sweep``). The closed month is re-priced from today's ledger and price list and compared
  with its frozen figures plus the adjustments already booked; any difference, per group, project
  and GPU type, becomes an adjustment booked in the next open month, with the reason and who.
* **Reopen**: only the latest closed month, with a reason. Its adjustments are voided (the month is
  priced on read again, so they would count twice); the close stays, marked reopened, audited.
"""

from collections import defaultdict
from datetime import date, datetime
from fractions import Fraction

from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.db.models import Q, Sum
from django.utils import timezone

from apps.core.numbers import money
from apps.ledger import closed
from apps.ledger.models import Adjustment, FrozenUsage, MonthClose, MonthCloseEvent
from apps.ledger.rollups import built_until
from apps.ledger.usage import MONEY_DENOMINATOR, PRICE_SCALE, usage_by
from apps.pricing.selectors import currencies, price_segments

FROZEN_KEY = ["group_id", "user_id", "project_id", "agent_id", "pool_id", "gpu_type_id"]
ADJUSTMENT_KEY = ["group_id", "project_id", "gpu_type_id"]
LATE_CORRECTION = "Usage of the closed month corrected after its close"
CLOSING_LOCK_KEY = 0x6B6C6D63  # "klmc"


def _serialise() -> None:
    """Closing, reopening, sweeping and booking a price change's adjustments run one at a time
    (a transaction-level advisory lock on PostgreSQL; SQLite writes one at a time anyway), so that
    two closes of a month, or a reopen beside a price change, never both write."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CLOSING_LOCK_KEY])


def _units(gpu_us: int, price) -> int:
    """Exact cost x MONEY_DENOMINATOR: GPU-microseconds x the price in 1/10000."""
    return 0 if price is None else gpu_us * int(price * PRICE_SCALE)


@transaction.atomic
def close_month(month: date, *, actor=None, now: datetime | None = None) -> MonthClose:
    now = now or timezone.now()
    month = month.replace(day=1)
    start, end = closed.month_bounds(month)
    if end > now:
        raise ValidationError({"month": f"{month:%B %Y} has not ended yet: close it from {end:%Y-%m-%d}."})
    _serialise()
    if MonthClose.objects.filter(month=month, reopened_at__isnull=True).exists():
        raise ValidationError({"month": f"{month:%B %Y} is already closed."})
    for earlier in closed.closes_in_force(None, start):
        record_adjustments(earlier, reason=LATE_CORRECTION, actor=actor, now=now)
    close = MonthClose.objects.create(month=month, closed_at=now, closed_by=actor)
    rolled = built_until()
    rows = []
    for currency in currencies():
        segments = price_segments(currency, start, end)
        close.prices[currency] = [
            {
                "gpu_type": s.gpu_type_id,
                "start": s.start.isoformat(),
                "end": s.end.isoformat(),
                "per_gpu_hour": None if s.per_gpu_hour is None else f"{s.per_gpu_hour:.4f}",
            }
            for s in segments
        ]
        for (key, i), (gpu, budget) in usage_by(FROZEN_KEY, Q(), start, end, segments, rolled).items():
            if i < 0 or not (gpu or budget):
                continue
            price = segments[i].per_gpu_hour
            rows.append(
                FrozenUsage(
                    close=close,
                    currency=currency,
                    **dict(zip(FROZEN_KEY, key, strict=True)),
                    segment_start=segments[i].start,
                    per_gpu_hour=price,
                    gpu_us=gpu,
                    budget_us=budget,
                    cost=money(Fraction(_units(gpu, price), MONEY_DENOMINATOR)),
                )
            )
    close.save(update_fields=["prices"])
    FrozenUsage.objects.bulk_create(rows, batch_size=5000)
    MonthCloseEvent.objects.create(close=close, action=MonthCloseEvent.Action.CLOSED, actor=actor, at=now)
    return close


@transaction.atomic
def reopen_month(close: MonthClose, *, actor=None, reason: str, now: datetime | None = None) -> MonthClose:
    now = now or timezone.now()
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Say why the month is reopened."})
    _serialise()
    close = MonthClose.objects.get(pk=close.pk)
    if close.reopened_at is not None:
        raise ValidationError({"month": f"{close.month:%B %Y} is not closed."})
    later = (
        MonthClose.objects.filter(reopened_at__isnull=True, month__gt=close.month).order_by("month").first()
    )
    if later is not None:
        raise ValidationError(
            {"month": f"Reopen {later.month:%B %Y} first: only the latest closed month can be reopened."}
        )
    close.reopened_at, close.reopened_by, close.reopen_reason = now, actor, reason
    close.save(update_fields=["reopened_at", "reopened_by", "reopen_reason"])
    Adjustment.objects.filter(closed_month=close.month, voided_at__isnull=True).update(voided_at=now)
    MonthCloseEvent.objects.create(
        close=close, action=MonthCloseEvent.Action.REOPENED, actor=actor, reason=reason, at=now
    )
    return close


def record_adjustments(
    close: MonthClose,
    *,
    reason: str,
    actor=None,
    only_currency: str | None = None,
    now: datetime | None = None,
) -> list[Adjustment]:
    """Book the difference between the closed month re-priced today and its frozen figures plus
    the adjustments already booked for it, per group, project and GPU type; nothing when they
    agree."""
    now = now or timezone.now()
    start, end = closed.month_bounds(close.month)
    booked_in = closed.next_open_month(close.month)
    rolled = built_until()
    made = []
    for currency in close.prices:
        if only_currency and currency != only_currency:
            continue
        delta: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
        segments = price_segments(currency, start, end)
        for (key, i), (gpu, budget) in usage_by(ADJUSTMENT_KEY, Q(), start, end, segments, rolled).items():
            entry = delta[key]
            entry[0] += gpu
            entry[1] += budget
            entry[2] += _units(gpu, segments[i].per_gpu_hour if i >= 0 else None)
        frozen = (
            FrozenUsage.objects.filter(close=close, currency=currency)
            .values(*ADJUSTMENT_KEY, "per_gpu_hour")
            .annotate(gpu=Sum("gpu_us"), budget=Sum("budget_us"))
            .order_by()
        )
        for row in frozen:
            entry = delta[tuple(row[n] for n in ADJUSTMENT_KEY)]
            entry[0] -= row["gpu"]
            entry[1] -= row["budget"]
            entry[2] -= _units(row["gpu"], row["per_gpu_hour"])
        booked = (
            Adjustment.objects.filter(
                closed_month=close.month,
                currency=currency,
                voided_at__isnull=True,
                source=Adjustment.Source.REPRICING,
            )
            .values(*ADJUSTMENT_KEY)
            .annotate(gpu=Sum("gpu_us"), budget=Sum("budget_us"), units=Sum("cost_units"))
            .order_by()
        )
        for row in booked:
            entry = delta[tuple(row[n] for n in ADJUSTMENT_KEY)]
            entry[0] -= row["gpu"]
            entry[1] -= row["budget"]
            entry[2] -= int(row["units"])
        for key, (gpu, budget, units) in sorted(delta.items(), key=lambda item: tuple(map(str, item[0]))):
            if gpu or budget or units:
                made.append(
                    Adjustment(
                        closed_month=close.month,
                        booked_in=booked_in,
                        currency=currency,
                        **dict(zip(ADJUSTMENT_KEY, key, strict=True)),
                        gpu_us=gpu,
                        budget_us=budget,
                        cost_units=units,
                        cost=money(Fraction(units, MONEY_DENOMINATOR)),
                        reason=reason,
                        actor=actor,
                        at=now,
                    )
                )
    return Adjustment.objects.bulk_create(made)


@transaction.atomic
def sweep(*, actor=None, now: datetime | None = None) -> list[Adjustment]:
    """Look for late usage corrections in every closed month and book them."""
    _serialise()
    made = []
    for close in closed.closes_in_force():
        made += record_adjustments(close, reason=LATE_CORRECTION, actor=actor, now=now)
    return made


def price_changed(change) -> list[Adjustment]:
    """After a GPU price was created, changed or deleted (in its transaction): book what it
    changes in the closed months from its effective date on, in its currency and, when the change
    moved the price to another currency, in the one it left."""
    sides = [side for side in (change.before, change.after) if side]
    days = [date.fromisoformat(side["effective_from"]) for side in sides]
    if not days:
        return []
    touched = {change.currency} | {side["currency"] for side in sides if side.get("currency")}
    _serialise()
    since = closed.month_bounds(min(days))[0]
    made = []
    for close in closed.closes_in_force(since, None):
        for currency in sorted(touched & set(close.prices)):
            made += record_adjustments(
                close, reason=price_reason(change), actor=change.actor, only_currency=currency
            )
    return made


def price_reason(change) -> str:
    def side(values: dict) -> str:
        return f"{values['per_gpu_hour']} from {values['effective_from']}" if values else "none"

    return (
        f"Price of {change.priced} in {change.currency} {change.get_action_display().lower()}: "
        f"{side(change.before)} → {side(change.after)} (price change {change.pk})"
    )


def on_gpu_price_changed(sender, *, change, **_) -> None:
    price_changed(change)
