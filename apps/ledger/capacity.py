"""Unused capacity: per pool, the capacity in force over a report's range (its capacity history)
less the GPU-hours used, priced at the report's price segments. Estate-wide: only the estate
roles see it (``apps.ledger.visibility.may_see_unused_capacity``)."""

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from fractions import Fraction

from django.db.models import Q

from apps.core.gpus import to_milli
from apps.ledger import closed
from apps.ledger.report_spec import ReportSpec
from apps.ledger.rollups import to_ms
from apps.ledger.usage import MONEY_DENOMINATOR, PRICE_SCALE
from apps.pools.models import Pool
from apps.pools.selectors import capacity_history
from apps.pricing.selectors import Segment


@dataclass
class UnusedCapacity:
    """Capacity in force x hours minus the GPU-hours used, per pool, priced."""

    idle_us: dict[int, int]
    cost: dict[int, Fraction]
    used_us: dict[int, int]
    capacity_us: dict[int, int] = field(default_factory=dict)  # capacity in force x time


def _capacity_us(history, start: datetime, end: datetime) -> int:
    """GPU-microseconds of capacity in force in [start, end) (milli-GPUs x milliseconds)."""
    return sum(
        to_milli(c.in_force) * (to_ms(min(c.end, end)) - to_ms(max(c.start, start)))
        for c in history
        if c.start < end and c.end > start
    )


def unused_capacity(spec: ReportSpec, stop: datetime, segments: list[Segment], rolled) -> UnusedCapacity:
    """Per pool, the capacity in force at each moment of the range (its capacity history, so a
    pool resized or disabled since counts as it was then) less what was used, priced."""
    pools = Pool.objects.all()
    if spec.pool:
        pools = pools.filter(pk=spec.pool.pk)
    if spec.gpu_type:
        pools = pools.filter(gpu_type_id=spec.gpu_type.pk)
    pools = list(pools)
    history = capacity_history([p.pk for p in pools], spec.start, stop)
    pools = [p for p in pools if any(c.in_force > 0 for c in history[p.pk])]
    where = Q(pool_id__in=[p.pk for p in pools])
    used = closed.usage_by(["pool_id"], where, spec.start, stop, segments, rolled, spec.currency)
    used_in: dict[tuple[int, int], int] = defaultdict(int)
    for ((pool_id,), segment), (gpu, _) in used.items():
        used_in[(pool_id, segment)] += gpu
    result = UnusedCapacity({}, {}, {})
    for pool in pools:
        idle, cost, capacity = 0, Fraction(0), 0
        for i, segment in enumerate(segments):
            if segment.gpu_type_id != pool.gpu_type_id:
                continue
            in_force = _capacity_us(history[pool.pk], segment.start, segment.end)
            capacity += in_force
            free = max(0, in_force - used_in[(pool.pk, i)])
            idle += free
            if segment.per_gpu_hour is not None:
                cost += Fraction(free * int(segment.per_gpu_hour * PRICE_SCALE), MONEY_DENOMINATOR)
        result.idle_us[pool.pk] = idle
        result.cost[pool.pk] = cost
        result.used_us[pool.pk] = sum(gpu for (pool_id, _), gpu in used_in.items() if pool_id == pool.pk)
        result.capacity_us[pool.pk] = capacity
    return result
