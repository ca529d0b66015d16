"""Writes for GPU types and pools."""

from django.db import transaction

from apps.core.writes import validated_save
from apps.pools.models import GpuType, Pool


def create_gpu_type(*, name: str, memory_gb: int = 0) -> GpuType:
    return validated_save(GpuType(name=name, memory_gb=memory_gb))


def create_pool(
    *, name: str, kind: str, gpu_type: GpuType, capacity, region: str = "", enabled: bool = True
) -> Pool:
    return validated_save(
        Pool(name=name, kind=kind, gpu_type=gpu_type, capacity=capacity, region=region, enabled=enabled)
    )


def update_pool(pool: Pool, **fields) -> Pool:
    with transaction.atomic():
        return validated_save(pool, **fields)
