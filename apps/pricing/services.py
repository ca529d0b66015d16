"""Writes to the price list, GPU prices and node prices. Every creation, change and deletion goes
through here and leaves a ``PriceChange`` in the same transaction. Reports price usage at read
time, so a change (even one back-dated) shows in every report at once; no rollup has to be rebuilt."""

from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from apps.accounts.models import User
from apps.core.writes import validated_save
from apps.pricing.models import NodePrice, Price, PriceChange

AUDITED_FIELDS = ("gpu_type", "currency", "per_gpu_hour", "effective_from")
NODE_AUDITED_FIELDS = ("instance_type", "market", "currency", "per_node_hour", "effective_from")


def _snapshot(price: Price) -> dict[str, str]:
    return {
        "gpu_type": price.gpu_type.name,
        "currency": price.currency,
        "per_gpu_hour": f"{Decimal(price.per_gpu_hour):.4f}",
        "effective_from": price.effective_from.isoformat(),
    }


def _audit(price: Price, action: str, before: dict, after: dict, actor: User | None, via: str) -> None:
    PriceChange.objects.create(
        price=None if action == PriceChange.Action.DELETED else price,
        gpu_type_id=price.gpu_type_id,
        currency=price.currency,
        action=action,
        before=before,
        after=after,
        actor=actor,
        via=via,
        at=timezone.now(),
    )


@transaction.atomic
def save_price(price: Price, *, actor=None, via: str) -> Price:
    """Save a new or changed price (its fields already set) and audit it; a save that changes
    nothing leaves no record."""
    if price.pk is None:
        validated_save(price)
        _audit(price, PriceChange.Action.CREATED, {}, _snapshot(price), actor, via)
        return price
    before = _snapshot(Price.objects.select_related("gpu_type").get(pk=price.pk))
    validated_save(price)
    after = _snapshot(price)
    if after != before:
        _audit(price, PriceChange.Action.CHANGED, before, after, actor, via)
    return price


def create_price(
    *, gpu_type, per_gpu_hour, effective_from, currency: str = "EUR", actor=None, via: str
) -> Price:
    price = Price(
        gpu_type=gpu_type, currency=currency, per_gpu_hour=per_gpu_hour, effective_from=effective_from
    )
    return save_price(price, actor=actor, via=via)


def update_price(price: Price, *, actor=None, via: str, **fields) -> Price:
    unknown = set(fields) - set(AUDITED_FIELDS)
    if unknown:
        raise TypeError(f"not price fields: {sorted(unknown)}")
    for name, value in fields.items():
        setattr(price, name, value)
    return save_price(price, actor=actor, via=via)


@transaction.atomic
def delete_price(price: Price, *, actor=None, via: str) -> None:
    _audit(price, PriceChange.Action.DELETED, _snapshot(price), {}, actor, via)
    price.delete()


# Node prices: the same audit, naming the instance type and market instead of a GPU type.


def _node_snapshot(price: NodePrice) -> dict[str, str]:
    return {
        "instance_type": price.instance_type,
        "market": price.market,
        "currency": price.currency,
        "per_node_hour": f"{Decimal(price.per_node_hour):.4f}",
        "effective_from": price.effective_from.isoformat(),
    }


def _node_audit(price: NodePrice, action: str, before: dict, after: dict, actor: User | None, via: str):
    PriceChange.objects.create(
        node_price=None if action == PriceChange.Action.DELETED else price,
        instance_type=price.instance_type,
        market=price.market,
        currency=price.currency,
        action=action,
        before=before,
        after=after,
        actor=actor,
        via=via,
        at=timezone.now(),
    )


@transaction.atomic
def save_node_price(price: NodePrice, *, actor=None, via: str) -> NodePrice:
    """Save a new or changed node price and audit it; a save that changes nothing leaves no record."""
    if price.pk is None:
        validated_save(price)
        _node_audit(price, PriceChange.Action.CREATED, {}, _node_snapshot(price), actor, via)
        return price
    before = _node_snapshot(NodePrice.objects.get(pk=price.pk))
    validated_save(price)
    after = _node_snapshot(price)
    if after != before:
        _node_audit(price, PriceChange.Action.CHANGED, before, after, actor, via)
    return price


def create_node_price(
    *,
    instance_type: str,
    market: str,
    per_node_hour,
    effective_from,
    currency: str = "EUR",
    actor=None,
    via: str,
) -> NodePrice:
    price = NodePrice(
        instance_type=instance_type,
        market=market,
        currency=currency,
        per_node_hour=per_node_hour,
        effective_from=effective_from,
    )
    return save_node_price(price, actor=actor, via=via)


def update_node_price(price: NodePrice, *, actor=None, via: str, **fields) -> NodePrice:
    unknown = set(fields) - set(NODE_AUDITED_FIELDS)
    if unknown:
        raise TypeError(f"not node price fields: {sorted(unknown)}")
    for name, value in fields.items():
        setattr(price, name, value)
    return save_node_price(price, actor=actor, via=via)


@transaction.atomic
def delete_node_price(price: NodePrice, *, actor=None, via: str) -> None:
    _node_audit(price, PriceChange.Action.DELETED, _node_snapshot(price), {}, actor, via)
    price.delete()
