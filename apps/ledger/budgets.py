"""Time budgets on the database: use per UTC calendar period computed from usage intervals.

Budget hours = wall hours x the profile's time weight, per task, from placement until the work
has really stopped (running intervals count up to ``now``). Windows in which the engine was
disabled are not charged. A policy's use includes its subtree's, as its budget covers them.
Nothing here is a counter: every figure is recomputed from the intervals, so a missed or doubled
meter tick changes nothing.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import DateTimeField, DurationField, ExpressionWrapper, F, Q, Sum, Value
from django.db.models.functions import Coalesce, Greatest, Least
from django.utils import timezone

from apps.core.gpus import to_milli
from apps.engine.core import UNITS_PER_HOUR, period_bounds
from apps.engine.models import DisabledWindow
from apps.ledger.models import UsageInterval
from apps.policies.models import ResourcePolicy
from apps.policies.selectors import parent_policy_ids

HOUR = Decimal(3600)
MICRO = timedelta(microseconds=1)
MICROS_PER_HOUR = 3600 * 10**6


@dataclass(frozen=True)
class BudgetStatus:
    policy_id: int
    has_budget: bool
    period: str | None
    period_start: datetime
    resets_at: datetime
    budget_hours: Decimal | None
    used_hours: Decimal
    left_hours: Decimal | None
    burn_rate: Decimal
    projected_run_out: datetime | None
    alert_threshold: int
    used_up: bool
    gpu_hours: Decimal
    gpus_in_use: Decimal

    @property
    def used_fraction(self) -> Decimal | None:
        if not self.has_budget:
            return None
        if not self.budget_hours:
            return Decimal(1)
        return self.used_hours / self.budget_hours

    @property
    def over_threshold(self) -> bool:
        fraction = self.used_fraction
        return fraction is not None and fraction * 100 >= self.alert_threshold


def _micros(duration) -> int:
    if duration is None:
        return 0
    if isinstance(duration, timedelta):
        return duration // MICRO
    return int(duration)


def _overlap_by_policy(start: datetime, end: datetime, now: datetime) -> dict[int, tuple[int, Decimal]]:
    """Per policy (own tasks only): (budget units, GPU-microseconds) of the intervals inside
    [start, end), running ones counted up to ``now``. Budget units are the engine core's:
    milli-weight x microseconds, exact integers."""
    stop = min(end, now)
    if stop <= start:
        return {}
    lo = Value(start, output_field=DateTimeField())
    hi = Value(stop, output_field=DateTimeField())
    overlap = ExpressionWrapper(
        Least(Coalesce(F("end"), hi), hi) - Greatest(F("start"), lo), output_field=DurationField()
    )
    rows = (
        UsageInterval.objects.filter(start__lt=stop)
        .filter(Q(end__isnull=True) | Q(end__gt=start))
        .values("policy_id", "time_weight", "gpus")
        .annotate(span=Sum(overlap))
        .order_by()
    )
    result: dict[int, list] = defaultdict(lambda: [0, Decimal(0)])
    for row in rows:
        micros = max(_micros(row["span"]), 0)
        result[row["policy_id"]][0] += micros * to_milli(row["time_weight"])
        result[row["policy_id"]][1] += micros * row["gpus"]
    return {pk: (units, gpu_us) for pk, (units, gpu_us) in result.items()}


def _charged_by_policy(start: datetime, end: datetime, now: datetime) -> dict[int, tuple[int, Decimal]]:
    """Budget units charged in [start, end) with disabled-engine windows taken out (GPU time is
    the ledger's and keeps them)."""
    charged = _overlap_by_policy(start, end, now)
    windows = DisabledWindow.objects.filter(start__lt=min(end, now)).filter(
        Q(end__isnull=True) | Q(end__gt=start)
    )
    for window in windows:
        w_start, w_end = max(window.start, start), min(window.end or now, end)
        for pk, (units, _) in _overlap_by_policy(w_start, w_end, now).items():
            total, gpu_us = charged[pk]
            charged[pk] = (total - units, gpu_us)
    return charged


def budget_units_used(policies, now: datetime, parents: dict[int, int | None]) -> dict[int, int]:
    """Budget units each budgeted policy (its subtree included) used in its current period."""
    used: dict[int, int] = {}
    for kind in {p.budget_period for p in policies if p.has_budget}:
        start, end = period_bounds(now, kind)
        own = {pk: units for pk, (units, _) in _charged_by_policy(start, end, now).items()}
        subtree = _subtree_sums(own, parents)
        for policy in policies:
            if policy.has_budget and policy.budget_period == kind:
                used[policy.pk] = subtree.get(policy.pk, 0)
    return used


def _subtree_sums(own: dict, parents: dict[int, int | None]) -> dict:
    total: dict = defaultdict(int)
    for pk, amount in own.items():
        node, seen = pk, set()
        while node is not None and node not in seen:
            total[node] += amount
            seen.add(node)
            node = parents.get(node)
    return total


def budget_status(policies=None, now: datetime | None = None) -> dict[int, BudgetStatus]:
    """The time budget of each policy (all when ``policies`` is None) at ``now``.

    Policies without a budget get their use in the current UTC month, for display.
    """
    now = now or timezone.now()
    policies = list(ResourcePolicy.objects.all() if policies is None else policies)
    if not policies:
        return {}
    parents = parent_policy_ids()
    kinds = {p.budget_period if p.has_budget else "month" for p in policies}
    used = {}
    for kind in kinds:
        start, end = period_bounds(now, kind)
        charged = _charged_by_policy(start, end, now)
        used[kind] = (
            _subtree_sums({pk: Decimal(v[0]) / UNITS_PER_HOUR for pk, v in charged.items()}, parents),
            _subtree_sums({pk: v[1] / MICROS_PER_HOUR for pk, v in charged.items()}, parents),
        )
    running = (
        UsageInterval.objects.filter(end__isnull=True, start__lte=now)
        .values("policy_id")
        .annotate(weight=Sum("time_weight"), gpus=Sum("gpus"))
        .order_by()
    )
    rate = _subtree_sums({r["policy_id"]: r["weight"] for r in running}, parents)
    in_use = _subtree_sums({r["policy_id"]: r["gpus"] for r in running}, parents)

    result = {}
    for policy in policies:
        kind = policy.budget_period if policy.has_budget else "month"
        start, end = period_bounds(now, kind)
        used_hours = Decimal(used[kind][0].get(policy.pk, 0)).quantize(Decimal("0.001"))
        left = None
        run_out = None
        burn = Decimal(rate.get(policy.pk, 0))
        if policy.has_budget:
            left = policy.budget_hours - used_hours
            if left > 0 and burn > 0:
                run_out = now + timedelta(seconds=float(left / burn * HOUR))
        result[policy.pk] = BudgetStatus(
            policy_id=policy.pk,
            has_budget=policy.has_budget,
            period=policy.budget_period if policy.has_budget else None,
            period_start=start,
            resets_at=end,
            budget_hours=policy.budget_hours,
            used_hours=used_hours,
            left_hours=left,
            burn_rate=burn,
            projected_run_out=run_out,
            alert_threshold=policy.alert_threshold,
            used_up=policy.has_budget and left is not None and left <= 0,
            gpu_hours=Decimal(used[kind][1].get(policy.pk, 0)).quantize(Decimal("0.001")),
            gpus_in_use=Decimal(in_use.get(policy.pk, 0)),
        )
    return result
