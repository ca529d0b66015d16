"""Reads of leadership's cloud spend caps: each cap against the cloud spend of the UTC calendar
month (``docs/cloud.md``, "Cloud spend caps").

The organisation's cap counts the month's whole cloud spend, idle node-hours included; a business
unit's cap counts the spend attributed to the groups of its subtree (``CloudSpend.by_group``). A cap
is reached when the spend is at or above its amount, and resets at 00:00 UTC on the 1st of next
month. Three queries plus one ``cloud_spend`` per currency the caps use, however many caps there are.
"""

import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import connection
from django.db.models import Count, Max

from apps.accounts.models import Group
from apps.accounts.selectors import subtrees
from apps.cloud.costs import cloud_spend
from apps.cloud.models import CloudSpendCap
from apps.engine.core.budget import period_bounds

ZERO = Decimal(0)


@dataclass(frozen=True)
class CapStatus:
    cap_id: int
    group_id: int
    group: str
    scope: str  # "organisation" or "business unit"
    amount: Decimal
    currency: str
    spent: Decimal
    reached: bool
    period_start: datetime
    resets_at: datetime
    groups: frozenset[int] = frozenset()  # a business unit and every group below it
    unpriced_node_hours: Decimal = ZERO  # cloud node-hours of the month with no price in `currency`

    @property
    def everyone(self) -> bool:
        """The organisation's cap covers every group, one without a parent included."""
        return self.scope == "organisation"

    def covers(self, group_id: int) -> bool:
        return self.everyone or group_id in self.groups

    @property
    def share(self) -> float | None:
        """The part of the cap spent (1.0 = all of it); None for a cap of no amount."""
        return float(self.spent / self.amount) if self.amount else None


def month_bounds(now: datetime) -> tuple[datetime, datetime]:
    """00:00 UTC on the 1st of ``now``'s UTC month, and on the 1st of the next (a budget's month)."""
    return period_bounds(now, "month")


def cap_statuses(now: datetime) -> list[CapStatus]:
    """Every cap with the month's spend it counts: the organisation's first, then by name."""
    caps = list(CloudSpendCap.objects.select_related("group"))
    if not caps:
        return []
    start, resets_at = month_bounds(now)
    spends = {currency: cloud_spend(start, now, currency) for currency in sorted({c.currency for c in caps})}
    covered = subtrees({cap.group_id for cap in caps if cap.group.kind == Group.Kind.BUSINESS_UNIT})
    statuses = []
    for cap in caps:
        spend = spends[cap.currency]
        if cap.group.kind == Group.Kind.ORGANISATION:
            spent = spend.total
        else:
            spent = sum((spend.by_group.get(pk, ZERO) for pk in covered[cap.group_id]), ZERO)
        statuses.append(
            CapStatus(
                cap_id=cap.pk,
                group_id=cap.group_id,
                group=cap.group.name,
                scope=cap.group.get_kind_display().lower(),
                amount=cap.amount,
                currency=cap.currency,
                spent=spent,
                reached=spent >= cap.amount,
                period_start=start,
                resets_at=resets_at,
                groups=covered.get(cap.group_id, frozenset()),
                unpriced_node_hours=spend.unpriced_node_hours,
            )
        )
    statuses.sort(key=lambda status: (status.scope != "organisation", status.group, status.cap_id))
    return statuses


def reached_caps(now: datetime) -> list[CapStatus]:
    """The caps whose month's spend is at or above their amount."""
    return [status for status in cap_statuses(now) if status.reached]


_reading: tuple[tuple, float, list[CapStatus]] | None = None


def reached_caps_now(now: datetime) -> list[CapStatus]:
    """``reached_caps``, as the engine and the autoscaler read it on every pass: reused for
    ``CLOUD_CAP_CHECK_S`` while the caps and the month are the same (one aggregate query), read
    again at once when a cap is set, changed or removed or the month turns."""
    global _reading
    version = CloudSpendCap.objects.aggregate(n=Count("pk"), changed=Max("updated_at"), last=Max("pk"))
    if not version["n"]:
        return []
    key = (connection.alias, connection.settings_dict["NAME"], tuple(version.values()), month_bounds(now))
    clock = time.monotonic()
    if _reading is not None and _reading[0] == key and clock - _reading[1] < settings.CLOUD_CAP_CHECK_S:
        return _reading[2]
    reached = reached_caps(now)
    _reading = (key, clock, reached)
    return reached
