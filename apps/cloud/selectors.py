"""Reads for cloud pools: their nodes now and over time."""

from django.db.models import QuerySet

from apps.cloud.models import CloudNode, CloudPool


def live_nodes(cloud_pool: CloudPool) -> QuerySet[CloudNode]:
    """Nodes launching, booting, ready or being released: those the provider may bill."""
    return cloud_pool.nodes.filter(state__in=CloudNode.LIVE_STATES).select_related("instance_type", "worker")


def node_history(cloud_pool: CloudPool) -> QuerySet[CloudNode]:
    """Every node of the pool, newest first, with why each ended."""
    return cloud_pool.nodes.select_related("instance_type", "worker").order_by("-launched_at", "-pk")


def nodes() -> QuerySet[CloudNode]:
    """Every node of every cloud pool, newest first: IT's view of what the autoscaler launched."""
    return CloudNode.objects.select_related("cloud_pool__pool", "instance_type").order_by(
        "-launched_at", "-pk"
    )
