"""What cloud nodes cost: node-hours priced per instance type and market, the idle part (a node
alive and holding no task) and the part each group's usage pays (``docs/cloud.md``).

A node costs from its launch until it is terminated (or the end of the range, or now while it is
alive), whatever its state, at the price of the instance type name and market it was launched as.
It holds a task while a usage interval its worker claimed overlaps (the interval keeps its worker
when the task is requeued); the union of those intervals, clipped to its life, is its busy time and
the rest is idle. Each usage interval on the node pays its GPUs / the node's GPUs of the node's
price for its hours; what is left of a busy node's cost is its spare part (GPUs no task held).
Amounts stay exact (microseconds, fractions of money) and are rounded once, by the ledger's own
rounding (half up); the groups' parts are rounded together so that they never exceed the busy cost.
"""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q
from django.utils import timezone

from apps.cloud.models import CloudNode
from apps.core.numbers import hours, money, rounded
from apps.ledger.models import UsageInterval
from apps.ledger.rollups import overlapping
from apps.pools.models import Worker
from apps.pricing.selectors import NodeSegment, node_price_segments

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)
US_PER_HOUR = 3_600_000_000


def _us(moment: datetime) -> int:
    return (moment - EPOCH) // MICROSECOND


@dataclass(frozen=True)
class NodeCost:
    """One node's cost within the report range. ``per_node_hour`` is the price over its life in the
    range, time-weighted when a price change falls inside it, None when part of it has no price;
    ``cost`` and ``idle_cost`` are None when none of it has a price."""

    node_id: int
    node: str
    pool: str
    instance_type: str
    market: str
    start: datetime
    end: datetime
    hours: Decimal
    idle_hours: Decimal
    per_node_hour: Decimal | None
    cost: Decimal | None
    idle_cost: Decimal | None
    seconds: Decimal = Decimal(0)  # the node's life in the range, exact to the microsecond
    idle_seconds: Decimal = Decimal(0)


@dataclass(frozen=True)
class CloudLine:
    """The nodes of one pool, instance type and market: node-hours and cost, with the idle part."""

    pool: str
    instance_type: str
    market: str
    nodes: int
    hours: Decimal
    idle_hours: Decimal
    cost: Decimal
    idle_cost: Decimal
    unpriced_hours: Decimal


@dataclass(frozen=True)
class CloudSpend:
    """Cloud spend in one currency over [start, end). ``total`` = ``idle`` + ``attributed`` (the
    sum of ``by_group``) + ``spare``: the spare part is what busy nodes cost for the GPUs no task
    held. Each amount is rounded to the cent once, from exact figures; ``spare`` takes what is left,
    so the parts add up to the total exactly."""

    currency: str
    start: datetime
    end: datetime
    total: Decimal
    idle: Decimal
    by_group: dict[int, Decimal]
    unpriced_node_hours: Decimal
    nodes: list[NodeCost]
    lines: list[CloudLine] = field(default_factory=list)

    @property
    def attributed(self) -> Decimal:
        return sum(self.by_group.values(), Decimal("0.00"))

    @property
    def spare(self) -> Decimal:
        return self.total - self.idle - self.attributed

    @property
    def node_hours(self) -> Decimal:
        return sum((line.hours for line in self.lines), Decimal("0.000"))

    @property
    def idle_hours(self) -> Decimal:
        return sum((line.idle_hours for line in self.lines), Decimal("0.000"))

    @property
    def idle_share(self) -> Decimal | None:
        """The idle part of the total, in per cent (None when nothing is priced)."""
        if not self.total:
            return None
        return rounded(Fraction(self.idle) * 100 / Fraction(self.total), 1)


class _Priced:
    """Cost of stretches of one node's life at its prices (exact)."""

    def __init__(self, segments: list[tuple[int, int, Decimal | None]]):
        self.segments = segments

    def cost(self, start: int, end: int, share: Fraction = Fraction(1)) -> tuple[Fraction, int]:
        """(cost, microseconds without a price) of [start, end)."""
        cost, unpriced = Fraction(0), 0
        for seg_start, seg_end, price in self.segments:
            overlap = min(end, seg_end) - max(start, seg_start)
            if overlap <= 0:
                continue
            if price is None:
                unpriced += overlap
            else:
                cost += Fraction(overlap) * Fraction(price) * share / US_PER_HOUR
        return cost, unpriced

    def rate_at(self, moment: int) -> Decimal | None:
        """The price per node-hour in force at ``moment`` (None: no price then)."""
        return next((price for start, end, price in self.segments if start <= moment < end), None)


def node_pricing(node: CloudNode, prices: dict, start: datetime, end: datetime) -> _Priced:
    """A node's prices over [start, end): those of the instance type name and market it was
    launched as in ``prices`` (``node_price_segments``), else none."""
    segments = prices.get((node.instance_type_name, node.market)) or [NodeSegment(start, end, None)]
    return _Priced([(_us(s.start), _us(s.end), s.per_node_hour) for s in segments])


def _union(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[list[int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def _gaps(start: int, end: int, busy: list[tuple[int, int]]) -> list[tuple[int, int]]:
    gaps, cursor = [], start
    for busy_start, busy_end in busy:
        if busy_start > cursor:
            gaps.append((cursor, busy_start))
        cursor = max(cursor, busy_end)
    if cursor < end:
        gaps.append((cursor, end))
    return gaps


def alive(start: datetime, end: datetime):
    lives = Q(terminated_at__isnull=True) | Q(terminated_at__gt=start)
    return (
        CloudNode.objects.filter(launched_at__lt=end)
        .filter(lives)
        .select_related("cloud_pool__pool")
        .order_by("launched_at", "pk")
    )


def _held(nodes: list[CloudNode], start: datetime, end: datetime) -> dict[int, list[dict]]:
    """Node id -> the usage intervals its workers claimed (two queries). A node's workers are those
    of its pool enrolled with its hostname (a restarted daemon enrols again)."""
    by_host = {(node.cloud_pool.pool_id, node.name): node.pk for node in nodes}
    if not by_host:
        return {}
    workers = Worker.objects.filter(
        pool_id__in={pool for pool, _ in by_host}, hostname__in={name for _, name in by_host}
    ).values_list("pk", "pool_id", "hostname")
    node_of = {pk: by_host[(pool, host)] for pk, pool, host in workers if (pool, host) in by_host}
    held = defaultdict(list)
    rows = overlapping(UsageInterval.objects.filter(worker_id__in=list(node_of)), start, end)
    for row in rows.values("worker_id", "pool_id", "group_id", "gpus", "start", "end"):
        held[node_of[row["worker_id"]]].append(row)
    return held


@dataclass(frozen=True)
class _Exact:
    """One node's figures before rounding."""

    cost: Fraction
    idle: Fraction
    us: int
    idle_us: int
    unpriced_us: int
    by_group: dict[int, Fraction]


def _node_cost(
    node: CloudNode, held: list[dict], prices: dict, start: datetime, end: datetime, now: datetime
) -> tuple[NodeCost, _Exact] | None:
    """(NodeCost, its exact figures) of one node's life in [start, end); None when it has none."""
    life_start = max(node.launched_at, start)
    life_end = min(node.terminated_at or now, end)
    a, b = _us(life_start), _us(life_end)
    if b <= a:
        return None
    pricing = node_pricing(node, prices, start, end)
    cost, unpriced = pricing.cost(a, b)
    spans, by_group = [], defaultdict(Fraction)
    for row in held:
        if row["pool_id"] != node.cloud_pool.pool_id:
            continue
        s, e = max(a, _us(row["start"])), min(b, _us(row["end"] or life_end))
        if e <= s:
            continue
        spans.append((s, e))
        share = min(Fraction(row["gpus"]) / node.gpus, Fraction(1))
        by_group[row["group_id"]] += pricing.cost(s, e, share)[0]
    idle_us, idle_cost = 0, Fraction(0)
    for s, e in _gaps(a, b, _union(spans)):
        idle_us += e - s
        idle_cost += pricing.cost(s, e)[0]
    whole = unpriced < b - a
    per_hour = None
    if not unpriced:
        per_hour = (Decimal(cost.numerator * US_PER_HOUR) / Decimal(cost.denominator * (b - a))).quantize(
            Decimal("0.0001")
        )
    figures = NodeCost(
        node_id=node.pk,
        node=node.name,
        pool=node.cloud_pool.pool.name,
        instance_type=node.instance_type_name,
        market=node.market,
        start=life_start,
        end=life_end,
        hours=hours(b - a),
        idle_hours=hours(idle_us),
        per_node_hour=per_hour,
        cost=money(cost) if whole else None,
        idle_cost=money(idle_cost) if whole else None,
        seconds=Decimal(b - a).scaleb(-6),
        idle_seconds=Decimal(idle_us).scaleb(-6),
    )
    return figures, _Exact(cost, idle_cost, b - a, idle_us, unpriced, by_group)


def _split(parts: dict[int, Fraction], target: Decimal) -> dict[int, Decimal]:
    """The parts in cents, adding up to ``target`` exactly (largest remainder): each is rounded
    down, then the cents left go to the largest remainders (or, when ``target`` is below the parts
    rounded down, are taken from the smallest), ties to the lower key."""
    cents = {key: amount * 100 for key, amount in parts.items()}
    whole = {key: value.numerator // value.denominator for key, value in cents.items()}
    left = int(target.scaleb(2)) - sum(whole.values())
    order = sorted(parts, key=lambda key: (-(cents[key] - whole[key]), key))
    for key in order[:left]:
        whole[key] += 1
    for key in [key for key in reversed(order) if whole[key] > 0][: max(0, -left)]:
        whole[key] -= 1
    return {key: Decimal(whole[key]).scaleb(-2) for key in sorted(parts)}


def _lines(priced: list[tuple[CloudNode, _Exact]]) -> list[CloudLine]:
    """The nodes summed per pool, instance type (as launched) and market."""
    sums: dict[tuple[str, str, str], list[_Exact]] = defaultdict(list)
    for node, exact in priced:
        sums[(node.cloud_pool.pool.name, node.instance_type_name, node.market)].append(exact)
    return [
        CloudLine(
            pool=pool,
            instance_type=type_name,
            market=market,
            nodes=len(found),
            hours=hours(sum(exact.us for exact in found)),
            idle_hours=hours(sum(exact.idle_us for exact in found)),
            cost=money(sum((exact.cost for exact in found), Fraction(0))),
            idle_cost=money(sum((exact.idle for exact in found), Fraction(0))),
            unpriced_hours=hours(sum(exact.unpriced_us for exact in found)),
        )
        for (pool, type_name, market), found in sorted(sums.items())
    ]


def cloud_spend(start: datetime, end: datetime, currency: str, now: datetime | None = None) -> CloudSpend:
    """What every cloud node cost in [start, end) in ``currency``: the total, its idle part, the
    part each group's usage pays and the nodes one by one. Four queries however many nodes."""
    now = now or timezone.now()
    nodes = list(alive(start, end))
    held = _held(nodes, start, end)
    prices = node_price_segments(currency, start, end)
    costs, priced = [], []
    for node in nodes:
        found = _node_cost(node, held.get(node.pk, []), prices, start, end, now)
        if found:
            costs.append(found[0])
            priced.append((node, found[1]))
    by_group: dict[int, Fraction] = defaultdict(Fraction)
    for _, exact in priced:
        for group, amount in exact.by_group.items():
            by_group[group] += amount
    total = money(sum((exact.cost for _, exact in priced), Fraction(0)))
    idle = money(sum((exact.idle for _, exact in priced), Fraction(0)))
    attributed = min(money(sum(by_group.values(), Fraction(0))), total - idle)
    return CloudSpend(
        currency=currency,
        start=start,
        end=end,
        total=total,
        idle=idle,
        by_group=_split(by_group, attributed),
        unpriced_node_hours=hours(sum(exact.unpriced_us for _, exact in priced)),
        nodes=costs,
        lines=_lines(priced),
    )
