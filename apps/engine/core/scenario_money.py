"""Money in a scenario (issue 37): the prices per GPU-hour (top-level `"prices": {"EUR": {"<pool>":
"2.50"}}`, a pool not listed costs nothing in that currency) and a policy's money budget windows
(`{"amount": "500", "currency": "EUR", "period": "month"}` beside `{"hours": ..., "period": ...}`).
Amounts and prices are numbers or decimal strings; a price is held to the micro-unit.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from .budget import MICRO, money_to_units
from .scenario_model import ScenarioError
from .scenario_values import read_object
from .snapshot import PERIODS

CURRENCY = re.compile(r"[A-Z]{3}")


def read_amount(v, field: str) -> Decimal:
    """A number or a decimal string >= 0."""
    if isinstance(v, str):
        try:
            v = Decimal(v)
        except InvalidOperation:
            raise ScenarioError(f"{field}: must be a number, got {v!r}") from None
    elif isinstance(v, float):
        v = Decimal(repr(v))
    if isinstance(v, bool) or not isinstance(v, int | Decimal) or not Decimal(v).is_finite():
        raise ScenarioError(f"{field}: must be a number")
    if v < 0:
        raise ScenarioError(f"{field}: must be >= 0, got {v}")
    return Decimal(v)


def read_currency(v, field: str) -> str:
    if not isinstance(v, str) or not CURRENCY.fullmatch(v):
        raise ScenarioError(f"{field}: must be a three-letter ISO 4217 code in capitals, e.g. EUR")
    return v


def parse_prices(v, pool_names: set[str]) -> dict[str, dict[str, int]]:
    """Currency -> pool -> rate (the price per GPU-hour in micro-units)."""
    o = read_object(v, "prices", (), tuple(v) if isinstance(v, dict) else ())
    prices = {}
    for currency, by_pool in o.items():
        field = f"prices.{currency}"
        read_currency(currency, field)
        pools = read_object(by_pool, field, (), tuple(pool_names), unknown="unknown pool")
        rates = {}
        for pool, price in pools.items():
            micro = read_amount(price, f"{field}.{pool}") * MICRO
            if micro != micro.to_integral_value():
                raise ScenarioError(f"{field}.{pool}: a price is held to 0.000001")
            rates[pool] = int(micro)
        prices[currency] = rates
    return prices


def money_window(b: dict, field: str) -> tuple[str, int, str]:
    """A money window: (period, limit in money units, currency)."""
    read_object(b, field, ("amount", "currency", "period"), ())
    amount = read_amount(b["amount"], f"{field}.amount")
    currency = read_currency(b["currency"], f"{field}.currency")
    if b["period"] not in PERIODS:
        raise ScenarioError(f"{field}.period: must be one of {', '.join(PERIODS)}")
    return b["period"], money_to_units(amount), currency


def check_currencies(policies, prices: dict) -> None:
    """Every money window's currency has prices."""
    for i, p in enumerate(policies):
        for _, _, currency in p.money:
            if currency not in prices:
                raise ScenarioError(
                    f"policies[{i}].budgets: a money window in {currency} needs prices.{currency}"
                )
