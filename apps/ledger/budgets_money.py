"""Money budgets on the database: each money window's spend in its current UTC calendar period.

Spend is what the ledger charges the group's usage (its subtree's included): GPU-hours at the
GPU type's price in the window's currency, in effect when the usage ran (``apps.ledger.usage`` reads
it, ``apps.pricing.selectors.price_segments`` prices it), running work counted up to ``now``; usage
on a GPU type without a price in that currency costs nothing. The burn rate is the money per hour of
the running work at today's prices. Exact fractions, rounded once to the cent.
"""

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q, Sum
from django.utils import timezone

from apps.core.numbers import money
from apps.engine.core import period_bounds
from apps.ledger.models import UsageInterval
from apps.ledger.rollups import built_until
from apps.ledger.usage import MONEY_DENOMINATOR, PRICE_SCALE, usage_by
from apps.policies.selectors import money_windows, parent_policy_ids, subtree_sums, subtrees_of
from apps.pricing.selectors import price_segments
from klique import numbers

HOUR = Decimal(3600)
MICRO = timedelta(microseconds=1)


def run_out_words(used_up: bool, run_out: datetime | None, resets_at: datetime) -> str:
    """When a budget window (time or money) runs out, in words: a run-out at or after the reset is
    no run-out."""
    if used_up:
        return f"used up; resets {resets_at:%Y-%m-%d %H:%M} UTC"
    if run_out is None:
        return "not burning now"
    if run_out >= resets_at:
        return f"lasts until reset {resets_at:%Y-%m-%d %H:%M} UTC"
    return f"projected to run out at {run_out:%Y-%m-%d %H:%M} UTC"


@dataclass(frozen=True)
class MoneyStatus:
    """One money budget window of a policy in its current period."""

    policy_id: int
    period: str
    currency: str
    period_start: datetime
    resets_at: datetime
    amount: Decimal
    spent: Decimal
    left: Decimal
    burn_rate: Decimal
    projected_run_out: datetime | None
    alert_threshold: int

    @property
    def used_up(self) -> bool:
        return self.left <= 0

    @property
    def used_fraction(self) -> Decimal:
        return self.spent / self.amount if self.amount else Decimal(1)

    @property
    def over_threshold(self) -> bool:
        return self.used_fraction * 100 >= self.alert_threshold

    @property
    def runs_out_in_period(self) -> bool:
        return self.projected_run_out is not None and self.projected_run_out < self.resets_at

    @property
    def window_name(self) -> str:
        return {"day": "daily", "week": "weekly", "month": "monthly"}.get(self.period, "")

    def run_out_text(self) -> str:
        return run_out_words(self.used_up, self.projected_run_out, self.resets_at)

    def text(self) -> str:
        """ "budget 500.00 EUR/month, spent 312.40, run-out ..." in the portal's words."""
        return (
            f"budget {numbers.money(self.amount, self.currency)}/{self.period}, "
            f"spent {numbers.money(self.spent, self.currency)}, {self.run_out_text()}"
        )


def money_status(policies, now: datetime | None = None) -> dict[int, tuple[MoneyStatus, ...]]:
    """Each money window of each of ``policies`` at ``now``: {policy id: (status, ...)}, shortest
    period first; policies without a money window get no entry. Queries grow with the number of
    distinct (period, currency) pairs, never with the number of policies."""
    now = now or timezone.now()
    policies = list(policies)
    windows = money_windows(policies)
    if not windows:
        return {}
    parents = parent_policy_ids()
    roots = set(windows)
    below = subtrees_of(roots, parents)
    pairs = sorted({(period, currency) for by in windows.values() for period, (_, currency) in by.items()})
    rolled = built_until()
    segments_of = {}
    for currency in sorted({c for _, c in pairs}):
        earliest = min(period_bounds(now, period)[0] for period, c in pairs if c == currency)
        segments_of[currency] = price_segments(currency, earliest, now + MICRO)
    spent: dict[tuple[str, str], dict[int, Fraction]] = {}
    for period, currency in pairs:
        start, _ = period_bounds(now, period)
        segments = segments_of[currency]
        scaled = [None if s.per_gpu_hour is None else int(s.per_gpu_hour * PRICE_SCALE) for s in segments]
        own: dict[int, int] = defaultdict(int)
        if segments and start < now:
            sums = usage_by(["policy_id"], Q(policy_id__in=sorted(below)), start, now, segments, rolled)
            for ((policy_id,), segment), (gpu_us, _) in sums.items():
                if segment >= 0 and scaled[segment] is not None:
                    own[policy_id] += gpu_us * scaled[segment]
        spent[(period, currency)] = subtree_sums(
            {pk: Fraction(units, MONEY_DENOMINATOR) for pk, units in own.items()}, parents
        )
    running = list(
        UsageInterval.objects.filter(end__isnull=True, start__lte=now, policy_id__in=sorted(below))
        .values("policy_id", "gpu_type_id")
        .annotate(gpus=Sum("gpus"))
        .order_by()
    )
    rates: dict[str, dict[int, Decimal]] = {}
    for currency, segments in segments_of.items():
        today = {s.gpu_type_id: s.per_gpu_hour for s in segments if s.start <= now < s.end}
        own_rate: dict[int, Decimal] = defaultdict(Decimal)
        for row in running:
            price = today.get(row["gpu_type_id"])
            if price:
                own_rate[row["policy_id"]] += row["gpus"] * price
        rates[currency] = subtree_sums(own_rate, parents)
    result = {}
    for policy in policies:
        if policy.pk not in windows:
            continue
        each = []
        for period, (amount, currency) in windows[policy.pk].items():
            start, end = period_bounds(now, period)
            used = money(spent[(period, currency)].get(policy.pk, Fraction(0)))
            left = amount - used
            burn = rates[currency].get(policy.pk, Decimal(0))
            run_out = now + timedelta(seconds=float(left / burn * HOUR)) if left > 0 and burn > 0 else None
            each.append(
                MoneyStatus(
                    policy_id=policy.pk,
                    period=period,
                    currency=currency,
                    period_start=start,
                    resets_at=end,
                    amount=amount,
                    spent=used,
                    left=left,
                    burn_rate=burn,
                    projected_run_out=run_out,
                    alert_threshold=policy.alert_threshold,
                )
            )
        result[policy.pk] = tuple(each)
    return result
