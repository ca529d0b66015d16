"""Reads about pools and workers for the admin, the dashboards and the worker API."""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import Count, OuterRef, Q, Subquery, Sum

from apps.accounts.services import hash_token
from apps.pools.models import EnrolmentToken, MaintenanceWindow, Pool, PoolCapacityChange, Worker


@dataclass(frozen=True)
class CapacitySegment:
    """[start, end): the pool's declared capacity, whether it was enabled, and the GPUs its live
    worker daemons had (None: no daemon had served it yet). Before the pool's first history row it
    did not exist: capacity 0, not enabled."""

    start: datetime
    end: datetime
    capacity: Decimal
    enabled: bool
    observed: Decimal | None = None

    @property
    def in_force(self) -> Decimal:
        """What counts as the pool's capacity then, while enabled: the declared capacity, or what
        its live daemons had when that was less (``effective_capacity``)."""
        return effective_capacity(self.capacity, self.observed) if self.enabled else Decimal(0)


def effective_capacity(declared: Decimal, observed: Decimal | None) -> Decimal:
    """The one rule for a pool's capacity: what IT declared, but never more than its live worker
    daemons have once any has served it (the engine places against it, the ledger's unused
    capacity counts it)."""
    return declared if observed is None else min(declared, observed)


def daemon_gpus(pool_ids=None) -> dict[int, Decimal | None]:
    """For each pool that has had worker daemons: the GPUs of its active ones, or None when they
    are all lost or retired. One query."""
    rows = Worker.objects.all() if pool_ids is None else Worker.objects.filter(pool_id__in=list(pool_ids))
    active = Q(state=Worker.State.ACTIVE)
    totals = rows.values("pool_id").annotate(
        active=Count("pk", filter=active), gpus=Sum("gpus", filter=active)
    )
    return {row["pool_id"]: (Decimal(row["gpus"]) if row["active"] else None) for row in totals.order_by()}


def live_gpus(pool_ids=None) -> dict[int, Decimal]:
    """The GPUs of each pool's active worker daemons (pools with at least one)."""
    return {pk: gpus for pk, gpus in daemon_gpus(pool_ids).items() if gpus is not None}


def capacity_history(pool_ids, start: datetime, end: datetime) -> dict[int, list[CapacitySegment]]:
    """Each pool's capacity at each moment of [start, end), as consecutive segments that cover the
    range (adjacent equal ones merged), from its effective-dated history (``PoolCapacityChange``):
    the row in force at ``start`` and every row after it before ``end``."""
    pool_ids = list(pool_ids)
    rows = defaultdict(list)
    in_force = PoolCapacityChange.objects.filter(pool_id=OuterRef("pool_id"), at__lte=start)
    latest = in_force.order_by("-at", "-pk").values("pk")[:1]
    before = PoolCapacityChange.objects.filter(pool_id__in=pool_ids, at__lte=start, pk=Subquery(latest))
    for row in before:
        rows[row.pool_id].append(row)
    inside = PoolCapacityChange.objects.filter(pool_id__in=pool_ids, at__gt=start, at__lt=end)
    for row in inside.order_by("at", "pk"):
        rows[row.pool_id].append(row)
    out = {}
    for pool_id in pool_ids:
        state, since, segments = (Decimal(0), False, None), start, []
        changes = [(max(r.at, start), (r.capacity, r.enabled, r.observed)) for r in rows[pool_id]]
        for at, new in [*changes, (end, None)]:
            if new == state and at < end:
                continue
            if at > since:
                segments.append(CapacitySegment(since, at, *state))
                since = at
            state = new
        out[pool_id] = segments
    return out


def capacity_segments(pool: Pool, start: datetime, end: datetime) -> list[CapacitySegment]:
    """The capacity of ``pool`` in force at each moment of [start, end), as segments."""
    return capacity_history([pool.pk], start, end)[pool.pk]


def worker_by_token(raw: str) -> Worker | None:
    """The worker a worker token belongs to, unless it was retired. A lost worker's token still
    works: it must be able to heartbeat (which makes it active again and names the tasks it has
    to stop) and to report; ``services.claim`` refuses it work until that heartbeat."""
    live = Worker.objects.exclude(state=Worker.State.RETIRED).select_related("pool")
    try:
        return live.get(token_hash=hash_token(raw))
    except Worker.DoesNotExist:
        return None


def enrolment_token_by_raw(raw: str, now) -> EnrolmentToken | None:
    """The enrolment token, if it exists and ``is_usable``: not revoked, and not expired unless it
    is a used single-use token (a cloud node's), which stays usable until revoked, for the hostname
    that used it only (``services.enrol_adopting`` checks that)."""
    try:
        token = EnrolmentToken.objects.select_related("pool").get(token_hash=hash_token(raw))
    except EnrolmentToken.DoesNotExist:
        return None
    return token if token.is_usable(now) else None


def windows_not_over(now: datetime, pool_ids=None):
    """Maintenance windows not called off or ended early and ending after ``now``, in start order
    (with their pools)."""
    rows = MaintenanceWindow.objects.filter(ends_at__gt=now, ended_at__isnull=True).select_related("pool")
    if pool_ids is not None:
        rows = rows.filter(pool_id__in=pool_ids)
    return rows.order_by("starts_at", "pk")
