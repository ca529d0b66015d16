"""Writes for the hardware: GPU types and pools, with the effective-dated history of each pool's
declared capacity."""

from datetime import datetime
from decimal import Decimal

from django.db import transaction
from django.db.models import Sum

from apps.core.gpus import GPU_COLUMN_MAX
from apps.core.writes import validated_save
from apps.pools.models import GpuType, Pool, PoolCapacityChange, Worker


def create_gpu_type(*, name: str, memory_gb: int = 0, generation: int = 0) -> GpuType:
    return validated_save(GpuType(name=name, memory_gb=memory_gb, generation=generation))


def update_gpu_type(gpu_type: GpuType, **fields) -> GpuType:
    """Refused when a smaller memory or older generation breaks a profile's minimum."""
    with transaction.atomic():
        return validated_save(gpu_type, **fields)


def create_pool(
    *,
    name: str,
    kind: str,
    gpu_type: GpuType,
    capacity,
    region: str = "",
    country: str = "",
    enabled: bool = True,
    by=None,
    reason: str = "created",
    now: datetime | None = None,
) -> Pool:
    """The pool's capacity history starts at ``now`` (default: the clock)."""
    pool = Pool(
        name=name,
        kind=kind,
        gpu_type=gpu_type,
        capacity=capacity,
        region=region,
        country=country,
        enabled=enabled,
    )
    pool.capacity_note = {"at": now, "by": by, "reason": reason}
    return validated_save(pool)


def update_pool(pool: Pool, *, by=None, reason: str = "", now: datetime | None = None, **fields) -> Pool:
    """Refused when a new country or GPU type breaks a profile that lists the pool (sovereignty,
    minimum GPU memory or generation), naming the profile. The pool's row is locked first:
    ``apps.policies.services.link_pool`` locks it too, so no profile is linked meanwhile. A new
    capacity or ``enabled`` goes into the capacity history from ``now``, with ``by`` and ``reason``."""
    with transaction.atomic():
        list(Pool.objects.select_for_update(no_key=True).filter(pk=pool.pk).values_list("pk", flat=True))
        pool.capacity_note = {"at": now, "by": by, "reason": reason}
        return validated_save(pool, **fields)


def record_capacity(pool: Pool, *, at: datetime | None = None, by=None, reason: str = "") -> bool:
    """Add a row to the pool's capacity history when its declared capacity or ``enabled`` differs
    from the row in force last; return whether it did. ``Pool.save`` records it on every save, the
    cloud autoscaler calls this after its own write."""
    return PoolCapacityChange.record(pool, at=at, by=by, reason=reason)


def record_observed(pool_id: int, at: datetime) -> bool:
    """Add a row to the pool's capacity history when the GPUs of its live (active) worker daemons
    differ from the observed capacity in force last; return whether it did. An autoscaled cloud
    pool is left out: its daemons come and go with the nodes launched for its work, and its
    capacity is the autoscaler's to record."""
    pool = (
        Pool.objects.select_for_update(no_key=True, of=("self",))
        .filter(pk=pool_id, cloud__isnull=True)
        .first()
    )
    if pool is None:
        return False
    live = Worker.objects.filter(pool_id=pool_id, state=Worker.State.ACTIVE).aggregate(gpus=Sum("gpus"))[
        "gpus"
    ]
    live = min(Decimal(live or 0), GPU_COLUMN_MAX)  # many daemons' GPUs may add up past the column
    last = PoolCapacityChange.objects.filter(pool_id=pool_id).order_by("-at", "-pk").first()
    if last is not None and last.observed == live:
        return False
    PoolCapacityChange.objects.create(
        pool=pool,
        at=max(at, last.at) if last is not None else at,
        capacity=last.capacity if last is not None else Decimal(pool.capacity),
        enabled=last.enabled if last is not None else pool.enabled,
        observed=live,
        reason=f"live worker daemons have {live.normalize():f} GPUs",
    )
    return True
