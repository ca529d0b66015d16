"""Writes for cloud pools, in three parts: the pools themselves (``pools``: create, instance types,
capacity, the provider), the autoscaler's pass (``autoscaler``) and leadership's spend caps
(``apps.cloud.spend_caps``). Callers import this package."""

from apps.cloud.services.autoscaler import autoscale, release_all, scale
from apps.cloud.services.pools import (
    add_instance_type,
    create_cloud_pool,
    maximum,
    provider_for,
    sync_capacity,
    user_data,
)
from apps.cloud.spend_caps import cap_errors, remove_cap, set_cap

__all__ = [
    "add_instance_type",
    "autoscale",
    "cap_errors",
    "create_cloud_pool",
    "maximum",
    "provider_for",
    "release_all",
    "remove_cap",
    "scale",
    "set_cap",
    "sync_capacity",
    "user_data",
]
