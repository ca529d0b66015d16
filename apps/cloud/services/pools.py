"""Writes for cloud pools: create one with its instance types, keep the pool's declared capacity at
its maximum while it is enabled, open its provider (one client per pool and settings), and the
user data a node boots with."""

from decimal import Decimal

from django.conf import settings
from django.db import transaction

from apps.cloud.models import (
    CloudNode,
    CloudPool,
    InstanceType,
)
from apps.core.writes import validated_save
from apps.pools import services as pools
from apps.pools.models import Pool
from klique.cloud.providers import open_provider

_providers: dict[tuple[int, str, str], object] = {}


def create_cloud_pool(*, pool: Pool, provider: str, settings: dict, **fields) -> CloudPool:
    cloud_pool = validated_save(CloudPool(pool=pool, provider=provider, settings=settings, **fields))
    sync_capacity(cloud_pool)
    return cloud_pool


def add_instance_type(
    cloud_pool: CloudPool, *, name: str, gpus: int, max_count: int, **fields
) -> InstanceType:
    """Add a type and bring the pool's declared capacity up to its new maximum."""
    with transaction.atomic():
        instance_type = validated_save(
            InstanceType(cloud_pool=cloud_pool, name=name, gpus=gpus, max_count=max_count, **fields)
        )
        sync_capacity(cloud_pool)
    return instance_type


def maximum(cloud_pool: CloudPool) -> Decimal:
    """The most GPUs the pool can grow to: each type's most instances x GPUs per instance."""
    return Decimal(sum(t.max_count * t.gpus for t in cloud_pool.instance_types.all()))


def sync_capacity(cloud_pool: CloudPool) -> Decimal:
    """A cloud pool's declared capacity is its maximum (0 while disabled: nothing would launch for
    work placed there); the engine places on it up to that. Its claim timeout covers a node's boot:
    work placed there waits for the node launched for it instead of going back to its queue after
    the plain claim timeout."""
    capacity = maximum(cloud_pool) if cloud_pool.enabled else Decimal(0)
    claim_timeout_s = cloud_pool.boot_timeout_s + int(settings.WORKER_CLAIM_TIMEOUT_S)
    Pool.objects.filter(pk=cloud_pool.pool_id).update(capacity=capacity, claim_timeout_s=claim_timeout_s)
    cloud_pool.pool.capacity, cloud_pool.pool.claim_timeout_s = capacity, claim_timeout_s
    reason = "cloud pool's maximum" if cloud_pool.enabled else "cloud pool disabled"
    pools.record_capacity(cloud_pool.pool, reason=reason)
    return capacity


def provider_for(cloud_pool: CloudPool):
    """One provider object per pool and settings in this process (the local provider remembers the
    processes it started)."""
    key = (cloud_pool.pk, cloud_pool.provider, repr(sorted(cloud_pool.settings.items())))
    if key not in _providers:
        _providers[key] = open_provider(cloud_pool.provider, cloud_pool.settings)
    return _providers[key]


def user_data(node: CloudNode, instance_type: InstanceType, token: str) -> str:
    """The node's boot data: ``KEY=VALUE`` lines its image's ``klique-worker`` unit reads."""
    lines = {
        "KLIQUE_SERVER": settings.KLIQUE_PUBLIC_URL,
        "KLIQUE_ENROLMENT_TOKEN": token,
        "KLIQUE_WORKER_GPUS": str(instance_type.gpus),
        "KLIQUE_WORKER_HOSTNAME": node.name,
        **settings.CLOUD_NODE_ENVIRONMENT,
    }
    return "".join(f"{name}={value}\n" for name, value in lines.items())
