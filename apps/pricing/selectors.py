"""Reads of the price list: the prices in effect over a time range, per GPU type and currency, and
per cloud instance type, market and currency."""

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from decimal import Decimal

from apps.accounts.models import Membership
from apps.accounts.selectors import has_estate_role, sees_whole_estate
from apps.pools.models import GpuType
from apps.pricing.models import NodePrice, Price, PriceChange

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


def effective(changes: list[tuple[datetime, Decimal]], start: datetime, end: datetime):
    """(start, end, amount) pieces covering [start, end) from a time-ordered list of (in effect
    from, amount); an amount is None before the first change."""
    current = None
    for at, amount in changes:
        if at <= start:
            current = amount
    pieces = []
    cursor = start
    for at, amount in changes:
        if start < at < end:
            pieces.append((cursor, at, current))
            cursor, current = at, amount
    pieces.append((cursor, end, current))
    return pieces


def price_segments(currency: str, start: datetime, end: datetime) -> list[Segment]:
    """For every GPU type, the prices in effect in [start, end), in time order. A price applies from
    00:00 UTC of its day until the next price of the same GPU type and currency."""
    prices: dict[int, list[Price]] = {}
    for price in Price.objects.filter(currency=currency).order_by("gpu_type_id", "effective_from"):
        prices.setdefault(price.gpu_type_id, []).append(price)
    segments = []
    for gpu_type_id in GpuType.objects.order_by("pk").values_list("pk", flat=True):
        changes = [(midnight(p.effective_from), p.per_gpu_hour) for p in prices.get(gpu_type_id, [])]
        segments += [Segment(gpu_type_id, *piece) for piece in effective(changes, start, end)]
    return segments


MICROSECOND = timedelta(microseconds=1)


def prices_at(currency: str, when: datetime) -> dict[int, Decimal | None]:
    """GPU type id -> its price per GPU-hour in ``currency`` in effect at ``when`` (None: none)."""
    return {s.gpu_type_id: s.per_gpu_hour for s in price_segments(currency, when, when + MICROSECOND)}


@dataclass(frozen=True)
class NodeSegment:
    """A stretch of time in which nodes of one instance type on one market have one price per
    node-hour (``None``: no price in the currency)."""

    start: datetime
    end: datetime
    per_node_hour: Decimal | None


def node_price_segments(
    currency: str, start: datetime, end: datetime
) -> dict[tuple[str, str], list[NodeSegment]]:
    """(instance type, market) -> the node prices in effect in [start, end), contiguous and in time
    order, for every pair that has a price in the currency; a pair missing has no price at all."""
    changes: dict[tuple[str, str], list] = {}
    rows = NodePrice.objects.filter(currency=currency).order_by("instance_type", "market", "effective_from")
    for price in rows:
        changes.setdefault((price.instance_type, price.market), []).append(
            (midnight(price.effective_from), price.per_node_hour)
        )
    return {
        key: [NodeSegment(*piece) for piece in effective(found, start, end)] for key, found in changes.items()
    }


def currencies() -> list[str]:
    """Currencies with prices: those of GPU prices, the most used first, then those only node
    prices use (cloud spend can be reported in them); the default when there are none."""
    gpu = [c for c, _ in Counter(Price.objects.values_list("currency", flat=True)).most_common()]
    node = Counter(NodePrice.objects.exclude(currency__in=gpu).values_list("currency", flat=True))
    return gpu + [c for c, _ in node.most_common()] or [DEFAULT_CURRENCY]


def prices():
    return Price.objects.select_related("gpu_type")


def node_prices():
    return NodePrice.objects.all()


def price_changes():
    return PriceChange.objects.select_related("gpu_type", "actor", "price", "node_price")


def may_edit_prices(user) -> bool:
    """IT and finance at the organisation's root set prices: the price list is the whole estate's
    (every unit is priced by it), so finance of a business unit reads it but does not change it."""
    return has_estate_role(user, Role.FINANCE, Role.IT_ADMIN)


def may_see_price_changes(user) -> bool:
    return sees_whole_estate(user)
