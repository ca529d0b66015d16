"""What agents have spent, read from the ledger for their caps and their pages: GPU-hours and budget
hours of the current UTC day, and the cost of the current UTC month in the estate's currency
(the most used price currency, ``apps.pricing.selectors.currencies``), priced as the usage report
prices it (closed months at their frozen prices). Budget hours are the ledger's (time x the
profile's time weight), as time budgets count them."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from fractions import Fraction

from django.db.models import Q
from django.utils import timezone

from apps.core.numbers import hours, money
from apps.engine.core import period_bounds
from apps.ledger import closed
from apps.ledger.rollups import built_until
from apps.ledger.usage import MONEY_DENOMINATOR, PRICE_SCALE
from apps.pricing.selectors import currencies


@dataclass(frozen=True)
class AgentSpend:
    gpu_hours_today: Decimal
    budget_hours_today: Decimal
    cost_month: Decimal | None  # None: none of its GPU types had a price (a money cap is inert)
    unpriced_gpu_hours_month: Decimal
    currency: str


def agent_spend(agent_ids, now: datetime | None = None) -> dict[int, AgentSpend]:
    """Each agent's spend so far today and this month (agents without usage show zeros)."""
    ids = list(agent_ids)
    if not ids:
        return {}
    now = now or timezone.now()
    currency = currencies()[0]
    day_start, _ = period_bounds(now, "day")
    month_start, _ = period_bounds(now, "month")
    rolled, where = built_until(), Q(agent_id__in=ids)
    segments = closed.report_segments(currency, month_start, now)
    month = closed.usage_by(["agent_id"], where, month_start, now, segments, rolled, currency)
    day_segments = closed.report_segments(currency, day_start, now)
    day = closed.usage_by(["agent_id"], where, day_start, now, day_segments, rolled, currency)
    gpu_day = dict.fromkeys(ids, 0)
    budget_day = dict.fromkeys(ids, 0)
    for ((agent_id,), _), (gpu, budget) in day.items():
        gpu_day[agent_id] += gpu
        budget_day[agent_id] += budget
    cost = dict.fromkeys(ids, Fraction(0))
    priced, unpriced = set(), dict.fromkeys(ids, 0)
    for ((agent_id,), segment), (gpu, _) in month.items():
        price = segments[segment].per_gpu_hour if segment >= 0 else None
        if price is None:
            unpriced[agent_id] += gpu
            continue
        priced.add(agent_id)
        cost[agent_id] += Fraction(gpu * int(price * PRICE_SCALE), MONEY_DENOMINATOR)
    return {
        pk: AgentSpend(
            gpu_hours_today=hours(gpu_day[pk]),
            budget_hours_today=hours(budget_day[pk]),
            cost_month=money(cost[pk]) if pk in priced or not unpriced[pk] and _any_price(segments) else None,
            unpriced_gpu_hours_month=hours(unpriced[pk]),
            currency=currency,
        )
        for pk in ids
    }


def _any_price(segments) -> bool:
    return any(segment.per_gpu_hour is not None for segment in segments)


def prices_exist(now: datetime | None = None) -> bool:
    """Whether any GPU type has a price this month in the estate's currency: a money cap is inert
    (and the pages say so) while none has."""
    now = now or timezone.now()
    month_start, _ = period_bounds(now, "month")
    return _any_price(closed.report_segments(currencies()[0], month_start, now))


def spend_figures(agents) -> dict[int, dict]:
    """``apps.accounts.agents.USAGE_READERS``' reader: each agent's spend as the API shows it."""
    priced = prices_exist()
    return {
        pk: {
            "gpu_hours_today": spend.gpu_hours_today,
            "budget_hours_today": spend.budget_hours_today,
            "cost_this_month": spend.cost_month,
            "currency": spend.currency,
            "prices_exist": priced,
        }
        for pk, spend in agent_spend([agent.pk for agent in agents]).items()
    }
