"""The cloud bill reconciled: a month's imported bill against what Klique charged for its cloud
nodes, per pool, with the difference split into its causes; and booking a closed month's difference
as a ledger adjustment (``docs/cloud.md``, "Reconciling the cloud bill").

Klique's side of a node is its cost in the month by ``apps.cloud.costs`` (launch to termination at
the node price in the bill's currency). Per instance on the bill, with k(t) Klique's price at the
start of each line (0 where it has none):

* price difference = sum over its lines of (cost - hours x k(t)): the bill's hours at the bill's
  rate against the same hours at Klique's;
* hour difference = sum over its lines of (hours x k(t)) - Klique's cost of the node: the bill's
  hours against Klique's at Klique's rate.

They add up to bill - Klique exactly. An instance on the bill that is no Klique node is
*unmatched* (its pool: the one its ``klique:pool`` tag names, else none); a Klique node with no
line is *missing* (-Klique's cost). Exact fractions throughout; each pool's figures are rounded to
the cent once, the causes together so that they add up to the difference shown."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from fractions import Fraction

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Group
from apps.cloud import bills
from apps.cloud.costs import US_PER_HOUR, _us, alive, node_pricing
from apps.cloud.models import CloudBill, CloudBillBooking, CloudNode, CloudPool
from apps.core.audit import record_change
from apps.core.numbers import hours, money
from apps.ledger import closed
from apps.ledger.models import Adjustment, MonthClose
from apps.ledger.usage import MONEY_DENOMINATOR
from apps.pricing.selectors import node_price_segments

CAUSES = ("unmatched", "missing", "price", "hours")
ZERO = Decimal("0.00")


@dataclass(frozen=True)
class Instance:
    """One instance's figures (each rounded on its own). ``cause``: matched, unmatched or missing."""

    instance_id: str
    node: str
    cause: str
    klique_hours: Decimal
    bill_hours: Decimal
    klique_rate: Decimal | None
    bill_rate: Decimal | None
    klique: Decimal
    bill: Decimal
    price: Decimal
    hours: Decimal

    @property
    def difference(self) -> Decimal:
        return self.bill - self.klique


@dataclass(frozen=True)
class PoolFigures:
    """One pool's month (``pool`` empty: instances no pool claims). ``difference`` = ``bill`` -
    ``klique`` = ``unmatched`` + ``missing`` + ``price`` + ``hours``, to the cent."""

    cloud_pool_id: int | None
    pool: str
    klique: Decimal
    bill: Decimal
    unmatched: Decimal
    missing: Decimal
    price: Decimal
    hours: Decimal
    unpriced_hours: Decimal
    instances: list[Instance]
    booking: CloudBillBooking | None = None

    @property
    def difference(self) -> Decimal:
        return self.bill - self.klique


@dataclass
class Reconciliation:
    month: date
    bill: CloudBill
    closed: bool
    pools: list[PoolFigures] = field(default_factory=list)

    @property
    def currency(self) -> str:
        return self.bill.currency

    def total(self, name: str) -> Decimal:
        return sum((getattr(pool, name) for pool in self.pools), ZERO)


@dataclass
class _Exact:
    klique: Fraction = Fraction(0)
    bill: Fraction = Fraction(0)
    parts: dict = field(default_factory=lambda: dict.fromkeys(CAUSES, Fraction(0)))
    unpriced_us: int = 0
    instances: list = field(default_factory=list)


def split(parts: dict[str, Fraction], target: Decimal) -> dict[str, Decimal]:
    """The parts in cents adding up to ``target`` (within a cent of their sum per part): each
    rounded down, the cents left to the largest remainders, ties in the order of the keys."""
    cents = {key: value * 100 for key, value in parts.items()}
    whole = {key: value.numerator // value.denominator for key, value in cents.items()}
    left = int(target.scaleb(2)) - sum(whole.values())
    order = sorted(parts, key=lambda key: (-(cents[key] - whole[key]), list(parts).index(key)))
    for key in order[: max(left, 0)]:
        whole[key] += 1
    for key in reversed(order[len(order) + min(left, 0) :]):
        whole[key] -= 1
    return {key: Decimal(whole[key]).scaleb(-2) for key in parts}


def _rate(value: Fraction, us: int) -> Decimal | None:
    return money(value * US_PER_HOUR / us) if us else None


def _instance(instance_id: str, node: CloudNode | None, life: tuple[int, int], lines, pricing) -> tuple:
    """(Instance, Klique's and the bill's exact cost, the price and hour parts, unpriced microseconds)."""
    bill = sum((Fraction(line.cost) for line in lines), Fraction(0))
    bill_hours = sum((line.hours for line in lines), Decimal(0))
    klique = price = hour = Fraction(0)
    us = unpriced = 0
    if node is not None:
        us = max(life[1] - life[0], 0)
        klique, unpriced = pricing.cost(*life)
        if lines:
            rates = [Fraction(pricing.rate_at(_us(line.usage_start)) or 0) for line in lines]
            at_klique = sum(
                (Fraction(line.hours) * rate for line, rate in zip(lines, rates, strict=True)), Fraction(0)
            )
            price, hour = bill - at_klique, at_klique - klique
    shown = Instance(
        instance_id=instance_id,
        node=node.name if node else "",
        cause="unmatched" if node is None else ("matched" if lines else "missing"),
        klique_hours=hours(us),
        bill_hours=bill_hours,
        klique_rate=_rate(klique, us - unpriced) if node else None,
        bill_rate=money(bill / Fraction(bill_hours)) if bill_hours else None,
        klique=money(klique),
        bill=money(bill),
        price=money(price),
        hours=money(hour),
    )
    return shown, klique, bill, price, hour, unpriced


def _nodes(bill: CloudBill, start: datetime, end: datetime) -> list[CloudNode]:
    nodes = {node.pk: node for node in alive(start, end)}
    matched = set(bill.lines.exclude(node=None).values_list("node_id", flat=True)) - set(nodes)
    nodes |= {
        node.pk: node for node in CloudNode.objects.filter(pk__in=matched).select_related("cloud_pool__pool")
    }
    return sorted(nodes.values(), key=lambda node: (node.cloud_pool.pool.name, node.name))


def reconcile(
    month: date, bill: CloudBill | None = None, now: datetime | None = None
) -> Reconciliation | None:
    """The month's reconciliation from ``bill`` (default: its latest import); None without one."""
    month = month.replace(day=1)
    bill = bill or bills.latest(month)
    if bill is None:
        return None
    now = now or timezone.now()
    start, end = closed.month_bounds(month)
    lines = defaultdict(list)
    for line in bill.lines.order_by("usage_start", "pk"):
        lines[line.node_id or line.instance_id].append(line)
    prices = node_price_segments(bill.currency, start, end)
    pools = {p.pk: p for p in CloudPool.objects.select_related("pool")}
    by_name = {p.pool.name: p.pk for p in pools.values()}
    exact: dict[int | None, _Exact] = defaultdict(_Exact)

    def add(pool_id, shown, klique, billed, price, hour, unpriced, cause_part):
        figures = exact[pool_id]
        figures.klique += klique
        figures.bill += billed
        figures.parts["price"] += price
        figures.parts["hours"] += hour
        for cause, amount in cause_part.items():
            figures.parts[cause] += amount
        figures.unpriced_us += unpriced
        figures.instances.append(shown)

    for node in _nodes(bill, start, end):
        found = lines.pop(node.pk, [])
        life = (_us(max(node.launched_at, start)), _us(min(node.terminated_at or now, end)))
        pricing = node_pricing(node, prices, start, end)
        shown, klique, billed, price, hour, unpriced = _instance(
            node.instance_id or "-", node, life, found, pricing
        )
        if not found and not klique:
            continue
        add(
            node.cloud_pool_id,
            shown,
            klique,
            billed,
            price,
            hour,
            unpriced,
            {} if found else {"missing": -klique},
        )
    for instance_id, found in sorted(lines.items(), key=lambda item: str(item[0])):
        shown, _, billed, *_ = _instance(str(instance_id), None, (0, 0), found, None)
        add(by_name.get(found[0].tagged_pool), shown, Fraction(0), billed, 0, 0, 0, {"unmatched": billed})
    bookings = {
        booking.cloud_pool_id: booking
        for booking in CloudBillBooking.objects.filter(
            month=month, adjustment__voided_at__isnull=True
        ).select_related("actor")
    }
    result = Reconciliation(
        month=month,
        bill=bill,
        closed=MonthClose.objects.filter(month=month, reopened_at__isnull=True).exists(),
    )
    order = sorted(exact, key=lambda pk: (pk is None, pools[pk].pool.name if pk else ""))
    for pool_id in order:
        figures = exact[pool_id]
        klique, billed = money(figures.klique), money(figures.bill)
        parts = split(figures.parts, billed - klique)
        result.pools.append(
            PoolFigures(
                cloud_pool_id=pool_id,
                pool=pools[pool_id].pool.name if pool_id else "",
                klique=klique,
                bill=billed,
                **parts,
                unpriced_hours=hours(figures.unpriced_us),
                instances=sorted(figures.instances, key=lambda i: (i.cause, i.instance_id)),
                booking=bookings.get(pool_id),
            )
        )
    return result


def _organisation() -> Group:
    root = Group.objects.filter(parent__isnull=True, kind=Group.Kind.ORGANISATION).order_by("pk").first()
    if root is None:
        raise ValidationError({"pool": "No organisation group to book the difference on."})
    return root


@transaction.atomic
def book(
    cloud_pool: CloudPool,
    month: date,
    *,
    actor=None,
    via: str = CloudBillBooking.Via.PORTAL,
    now: datetime | None = None,
) -> CloudBillBooking:
    """Book the pool's difference (bill - Klique) of a closed month as an adjustment of the
    organisation on the pool's GPU type, in the next open month: once per pool and month."""
    now = now or timezone.now()
    month = month.replace(day=1)
    if not MonthClose.objects.filter(month=month, reopened_at__isnull=True).exists():
        raise ValidationError({"month": f"{month:%B %Y} is not closed: close it first, then book its bill."})
    cloud_pool = CloudPool.objects.select_for_update(no_key=True).select_related("pool").get(pk=cloud_pool.pk)
    booked = (
        CloudBillBooking.objects.filter(
            cloud_pool=cloud_pool, month=month, adjustment__voided_at__isnull=True
        )
        .select_related("actor")
        .first()
    )
    if booked is not None:
        raise ValidationError(
            {
                "pool": f"The cloud bill of {cloud_pool.pool.name} for {month:%B %Y} is already booked "
                f"({booked.amount} {booked.currency} by {booked.actor or 'system'} "
                f"at {booked.at:%Y-%m-%d %H:%M} UTC)."
            }
        )
    found = reconcile(month, now=now)
    if found is None:
        raise ValidationError({"month": f"No cloud bill of {month:%B %Y} is imported."})
    row = next((pool for pool in found.pools if pool.cloud_pool_id == cloud_pool.pk), None)
    if row is None or not row.difference:
        raise ValidationError(
            {
                "pool": f"The bill of {cloud_pool.pool.name} for {month:%B %Y} agrees with Klique: "
                "nothing to book."
            }
        )
    reason = (
        f"Cloud bill of {month:%B %Y} for pool {cloud_pool.pool.name}: the bill {row.bill} {found.currency}, "
        f"Klique {row.klique} {found.currency} (bill import {found.bill.pk})"
    )
    adjustment = Adjustment.objects.create(
        closed_month=month,
        booked_in=closed.next_open_month(month),
        currency=found.currency,
        group=_organisation(),
        project=None,
        gpu_type=cloud_pool.pool.gpu_type,
        gpu_us=0,
        budget_us=0,
        cost_units=int(row.difference.scaleb(2)) * (MONEY_DENOMINATOR // 100),
        cost=row.difference,
        reason=reason,
        source=Adjustment.Source.CLOUD_BILL,
        actor=actor,
        at=now,
    )
    return record_change(
        CloudBillBooking,
        actor=actor,
        via=via,
        at=now,
        cloud_pool=cloud_pool,
        month=month,
        bill=found.bill,
        adjustment=adjustment,
        amount=row.difference,
        currency=found.currency,
    )
