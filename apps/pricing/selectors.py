"""Reads of the price list: the prices in effect over a time range, per GPU type and currency."""

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, time
from decimal import Decimal

from apps.accounts.models import Membership
from apps.accounts.selectors import has_role, sees_whole_estate
from apps.pools.models import GpuType
from apps.pricing.models import Price, PriceChange

DEFAULT_CURRENCY = "EUR"
Role = Membership.Role


@dataclass(frozen=True)
class Segment:
    """A stretch of time in which one GPU type has one price (``None``: no price in the currency).

    Segments of a GPU type are contiguous and cover the report's whole range.
    """

    gpu_type_id: int
    start: datetime
    end: datetime
    per_gpu_hour: Decimal | None


def midnight(day) -> datetime:
    return datetime.combine(day, time(0), tzinfo=UTC)


def price_segments(currency: str, start: datetime, end: datetime) -> list[Segment]:
    """For every GPU type, the prices in effect in [start, end), in time order. A price applies from
    00:00 UTC of its day until the next price of the same GPU type and currency."""
    prices: dict[int, list[Price]] = {}
    for price in Price.objects.filter(currency=currency).order_by("gpu_type_id", "effective_from"):
        prices.setdefault(price.gpu_type_id, []).append(price)
    segments = []
    for gpu_type_id in GpuType.objects.order_by("pk").values_list("pk", flat=True):
        changes = [(midnight(p.effective_from), p.per_gpu_hour) for p in prices.get(gpu_type_id, [])]
        current = None
        for at, amount in changes:
            if at <= start:
                current = amount
        cursor = start
        for at, amount in changes:
            if start < at < end:
                segments.append(Segment(gpu_type_id, cursor, at, current))
                cursor, current = at, amount
        segments.append(Segment(gpu_type_id, cursor, end, current))
    return segments


def currencies() -> list[str]:
    """Currencies with prices, the most used first; the default when there are none."""
    counts = Counter(Price.objects.values_list("currency", flat=True))
    return [c for c, _ in counts.most_common()] or [DEFAULT_CURRENCY]


def prices():
    return Price.objects.select_related("gpu_type")


def price_changes():
    return PriceChange.objects.select_related("gpu_type", "actor", "price")


def may_edit_prices(user) -> bool:
    """Finance and IT set prices."""
    return has_role(user, Role.FINANCE, Role.IT_ADMIN)


def may_see_price_changes(user) -> bool:
    return sees_whole_estate(user)
