"""Reads for cloud pools: their nodes now and over time, and what they cost as finance's rows."""

from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.db.models import F, QuerySet, Sum

from apps.accounts.selectors import group_labels
from apps.cloud.costs import CloudSpend, cloud_spend
from apps.cloud.models import CloudNode, CloudPool, InstanceType
from apps.core.numbers import rounded


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


# Cloud spend: what cloud nodes cost (``apps.cloud.costs``), as the finance page's rows and the
# report API's cloud line. Cloud spend is estate-wide, like unused capacity: only IT, leadership
# and finance see it.

CLOUD_COLUMNS = [
    ("pool", "Pool", "text"),
    ("instance_type", "Instance type", "text"),
    ("market", "Market", "text"),
    ("nodes", "Nodes", "count"),
    ("node_hours", "Node-hours", "hours"),
    ("idle_hours", "Idle node-hours", "hours"),
    ("cost", "Cost", "money"),
    ("idle_cost", "Idle cost", "money"),
    ("unpriced_hours", "Unpriced node-hours", "hours"),
]
CLOUD_GROUP_COLUMNS = [
    ("part", "Part", "text"),
    ("group", "Group", "text"),
    ("group_path", "Path", "text"),
    ("cost", "Cost", "money"),
    ("share", "Share of cloud spend (%)", "percent"),
]


def spend(start: datetime, end: datetime, currency: str) -> CloudSpend:
    """What every cloud node cost in [start, end) in ``currency``, its idle and spare parts and the
    part each group's usage pays."""
    return cloud_spend(start, end, currency)


def cloud_records(spend: CloudSpend) -> list[dict]:
    """One row per pool, instance type (as launched) and market."""
    return [
        {
            "pool": line.pool,
            "instance_type": line.instance_type,
            "market": line.market,
            "nodes": line.nodes,
            "node_hours": line.hours,
            "idle_hours": line.idle_hours,
            "cost": line.cost,
            "idle_cost": line.idle_cost,
            "unpriced_hours": line.unpriced_hours,
        }
        for line in spend.lines
    ]


def cloud_total_record(spend: CloudSpend) -> dict:
    return {
        "pool": "Total",
        "instance_type": "",
        "market": "",
        "nodes": len(spend.nodes),
        "node_hours": spend.node_hours,
        "idle_hours": spend.idle_hours,
        "cost": spend.total,
        "idle_cost": spend.idle,
        "unpriced_hours": spend.unpriced_node_hours,
    }


def _share(part: Decimal, total: Decimal) -> Decimal | None:
    return rounded(Fraction(part) * 100 / Fraction(total), 1) if total else None


def cloud_group_records(spend: CloudSpend) -> list[dict]:
    """The part each group's usage pays, largest first, by name on a tie."""
    labels = group_labels(spend.by_group)
    rows = [
        {
            "part": "Attributed",
            "group": labels.get(pk, (str(pk), ""))[0],
            "group_path": labels.get(pk, (str(pk), ""))[1],
            "cost": amount,
            "share": _share(amount, spend.total),
        }
        for pk, amount in spend.by_group.items()
    ]
    return sorted(rows, key=lambda row: (-row["cost"], row["group"]))


def cloud_part_records(spend: CloudSpend) -> list[dict]:
    """The lines below the groups: the attributed, idle and spare parts and the total."""
    parts = [
        ("Attributed to groups", spend.attributed),
        ("Idle (nodes holding no task)", spend.idle),
        ("Spare (GPUs of busy nodes no task held)", spend.spare),
        ("Total", spend.total),
    ]
    return [
        {"part": name, "group": "", "group_path": "", "cost": amount, "share": _share(amount, spend.total)}
        for name, amount in parts
    ]


def pool_maximum(pool_id) -> QuerySet:
    """A cloud pool's maximum in GPUs (each instance type's most instances x GPUs per instance), as a
    one-row queryset for ``apps.policies.selectors.POOL_CEILINGS``."""
    return (
        InstanceType.objects.filter(cloud_pool__pool_id=pool_id)
        .values("cloud_pool")
        .annotate(gpus=Sum(F("max_count") * F("gpus")))
        .values("gpus")
    )
