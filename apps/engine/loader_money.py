"""Money budget windows for the engine's snapshot (issue 37): each becomes a ``core.Budget`` with
``rates`` (pool id -> price per GPU-hour in micro-units of the window's currency) and ``used`` (the
period's spend of the policy's subtree so far, in money units).

``used`` is the ledger's figure (``apps.ledger.budgets_money.money_status``, the one owner of a
money window's spend, which the portal, API and CLI show): the engine stops work at the spend they
show. The rates are today's prices of the pools' GPU types (``apps.pricing.selectors.prices_at``),
cloud pools included, as the ledger charges them (a cloud node's own cost is governed by
leadership's cloud spend caps: ``apps.cloud.caps``). A pool with no price in the currency has rate 0:
its work costs the window nothing, starts and is never stopped by it.

Queries per pass: none without a money window; with some, those of ``money_status`` (a fixed
number per (period, currency) pair) and one per currency here, whatever the number of windows
and policies.
"""

from datetime import datetime
from decimal import Decimal

from apps.engine import core
from apps.engine.core.budget import money_to_units, price_to_rate
from apps.ledger.budgets_money import money_status
from apps.pricing.selectors import prices_at


def pool_rates(currency: str, pool_rows: list[dict], now: datetime) -> dict[str, int]:
    """Pool id -> its rate in the currency now (pools without a price left out: rate 0)."""
    gpu = prices_at(currency, now)
    return {
        str(row["pk"]): price_to_rate(Decimal(gpu[row["gpu_type_id"]]))
        for row in pool_rows
        if gpu.get(row["gpu_type_id"])
    }


def money_budgets(policies, pool_rows: list[dict], now: datetime) -> dict[int, tuple]:
    """Policy id -> its money windows as core budgets, shortest period first."""
    status = money_status(policies, now)
    if not status:
        return {}
    currencies = sorted({s.currency for each in status.values() for s in each})
    rates = {c: pool_rates(c, pool_rows, now) for c in currencies}
    return {
        pk: tuple(
            core.Budget(
                limit=money_to_units(s.amount),
                period=s.period,
                used=max(0, money_to_units(s.spent)),
                rates=rates[s.currency],
                currency=s.currency,
            )
            for s in each
        )
        for pk, each in status.items()
    }
