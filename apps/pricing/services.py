"""Writes to the price list, GPU prices and node prices. Every creation, change and deletion goes
through here and leaves a ``PriceChange`` in the same transaction. Reports price usage at read
time, so a change (even one back-dated) shows in every report at once; no rollup has to be rebuilt."""

from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from django.db import transaction
from django.db.models import Model

from apps.accounts.models import User
from apps.core.audit import record_change
from apps.core.writes import validated_save
from apps.pricing import events
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


def _node_snapshot(price: NodePrice) -> dict[str, str]:
    return {
        "instance_type": price.instance_type,
        "market": price.market,
        "currency": price.currency,
        "per_node_hour": f"{Decimal(price.per_node_hour):.4f}",
        "effective_from": price.effective_from.isoformat(),
    }


def _adjust_closed_months(change: PriceChange) -> None:
    """A GPU price change reaching into a closed month is booked as adjustments in the next open
    month (``apps.ledger.closing``, a receiver of ``events.gpu_price_changed``); the closed month
    itself stays as it was frozen."""
    events.gpu_price_changed.send(sender=PriceChange, change=change)


@dataclass(frozen=True)
class AuditedPrices:
    """Audited writes of one kind of price: GPU prices and node prices differ only in their fields,
    their snapshot and the ``PriceChange`` fields that name what was priced."""

    model: type[Model]
    noun: str
    fields: tuple[str, ...]
    snapshot: Callable[[Model], dict[str, str]]
    link: str  # the PriceChange field pointing at the price (cleared once it is deleted)
    named_by: tuple[str, ...]  # the price's fields the PriceChange copies
    related: tuple[str, ...] = ()
    after_change: Callable[[PriceChange], object] | None = None

    def _audit(self, price, action: str, before: dict, after: dict, actor: User | None, via: str):
        change = record_change(
            PriceChange,
            actor=actor,
            via=via,
            **{self.link: None if action == PriceChange.Action.DELETED else price},
            **{name: getattr(price, name) for name in self.named_by},
            currency=price.currency,
            action=action,
            before=before,
            after=after,
        )
        if self.after_change is not None:
            self.after_change(change)

    @transaction.atomic
    def save(self, price, *, actor=None, via: str):
        """Save a new or changed price (its fields already set) and audit it; a save that changes
        nothing leaves no record."""
        if price.pk is None:
            validated_save(price)
            self._audit(price, PriceChange.Action.CREATED, {}, self.snapshot(price), actor, via)
            return price
        stored = self.model.objects.select_related(*self.related) if self.related else self.model.objects
        before = self.snapshot(stored.get(pk=price.pk))
        validated_save(price)
        after = self.snapshot(price)
        if after != before:
            self._audit(price, PriceChange.Action.CHANGED, before, after, actor, via)
        return price

    def update(self, price, *, actor=None, via: str, **fields):
        unknown = set(fields) - set(self.fields)
        if unknown:
            raise TypeError(f"not {self.noun} fields: {sorted(unknown)}")
        for name, value in fields.items():
            setattr(price, name, value)
        return self.save(price, actor=actor, via=via)

    @transaction.atomic
    def delete(self, price, *, actor=None, via: str) -> None:
        before = self.snapshot(price)
        price.delete()
        self._audit(price, PriceChange.Action.DELETED, before, {}, actor, via)


GPU_PRICES = AuditedPrices(
    model=Price,
    noun="price",
    fields=AUDITED_FIELDS,
    snapshot=_snapshot,
    link="price",
    named_by=("gpu_type_id",),
    related=("gpu_type",),
    after_change=_adjust_closed_months,
)
NODE_PRICES = AuditedPrices(
    model=NodePrice,
    noun="node price",
    fields=NODE_AUDITED_FIELDS,
    snapshot=_node_snapshot,
    link="node_price",
    named_by=("instance_type", "market"),
)

save_price = GPU_PRICES.save
update_price = GPU_PRICES.update
delete_price = GPU_PRICES.delete
save_node_price = NODE_PRICES.save
update_node_price = NODE_PRICES.update
delete_node_price = NODE_PRICES.delete


def create_price(
    *, gpu_type, per_gpu_hour, effective_from, currency: str = "EUR", actor=None, via: str
) -> Price:
    price = Price(
        gpu_type=gpu_type, currency=currency, per_gpu_hour=per_gpu_hour, effective_from=effective_from
    )
    return save_price(price, actor=actor, via=via)


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
