"""IT's changes to a what-if scenario (docs/whatif.md, "Comparison"): checked, each problem
raising WhatIfError naming the field, and applied to the scenario dict's initial estate.

    apply_changes(scenario, changes) -> scenario with the changes applied (input untouched)
"""

from __future__ import annotations

import re
from decimal import Decimal

from .scenario import parse
from .scenario_model import Scenario, ScenarioError
from .scenario_money import CURRENCY
from .snapshot import LENDING, PERIODS

CHANGE_KINDS = (
    "reservations",
    "limits",
    "budgets",
    "time_weights",
    "pool_order",
    "capacities",
    "lending",
    "over_quota_weights",
)
BLAME_ORDER = ("limits", "reservations", "budgets", "time_weights", "pool_order", "capacities", "lending")
AMOUNT_MAX = 10**12  # GPUs, hours or a time weight: far above any estate, far below Decimal's limits
# The set_* events a change replaces: change kind -> (event kind, the event's target key).
DROPPED = {
    "reservations": ("set_reservation", "policy"),
    "limits": ("set_limit", "policy"),
    "budgets": ("set_budget", "policy"),
    "capacities": ("set_capacity", "pool"),
}


class WhatIfError(ValueError):
    """Bad changes; the message names the field, e.g. `changes.reservations.vision: unknown policy`."""


def apply_changes(scenario: dict, changes: dict) -> dict:
    """A new scenario dict with `changes` applied to the initial estate; the input is not mutated
    (the new dict shares the unchanged event objects with it). set_* events of a changed field
    (a policy's reservation, limit or budget; a pool's capacity) are dropped."""
    return changed_scenario(scenario, changes)[0]


def changed_scenario(scenario: dict, changes: dict) -> tuple[dict, Scenario]:
    """The changed scenario dict and its parse."""
    if not isinstance(changes, dict):
        raise WhatIfError("changes: must be an object")
    for key in changes:
        if key not in CHANGE_KINDS:
            raise WhatIfError(f"changes.{key}: unknown field (one of {', '.join(CHANGE_KINDS)})")
    for key in CHANGE_KINDS:
        if key in changes and not isinstance(changes[key], dict):
            raise WhatIfError(f"changes.{key}: must be an object")
    if not isinstance(scenario, dict):
        raise WhatIfError("scenario: must be an object")
    out = dict(scenario)
    policies = [dict(p) for p in _items(scenario, "policies")]
    pools = [dict(p) for p in _items(scenario, "pools")]
    profiles = [dict(p) for p in _items(scenario, "profiles")]
    policy_by = {p.get("name"): p for p in policies}
    pool_by = {p.get("name"): p for p in pools}
    profile_by = {p.get("name"): p for p in profiles}

    for name, value in changes.get("reservations", {}).items():
        field = f"changes.reservations.{name}"
        _known(name, policy_by, field, "policy")["reservation"] = plain(_gpus(value, field))
    for name, value in changes.get("limits", {}).items():
        field = f"changes.limits.{name}"
        _known(name, policy_by, field, "policy")["limit"] = plain(_gpus(value, field))
    for name in dict.fromkeys([*changes.get("reservations", {}), *changes.get("limits", {})]):
        p = policy_by[name]
        res, lim = number(p.get("reservation", 0)), number(p.get("limit", 0))
        if lim is not None and res is not None and lim < res:
            if name in changes.get("limits", {}):
                raise WhatIfError(f"changes.limits.{name}: {_g(lim)} is below the reservation of {_g(res)}")
            raise WhatIfError(f"changes.reservations.{name}: {_g(res)} is above the limit of {_g(lim)}")
        lendable = number(p.get("lendable"))
        if lendable is not None and res is not None and lendable > res:
            p["lendable"] = plain(res)  # lowered below its lendable part, it lends at most all of it
    for name, value in changes.get("budgets", {}).items():
        field = f"changes.budgets.{name}"
        p = _known(name, policy_by, field, "policy")
        p.pop("budget", None)
        p["budgets"] = _windows(value, field)
    for name, value in changes.get("lending", {}).items():
        field = f"changes.lending.{name}"
        p = _known(name, policy_by, field, "policy")
        if value not in LENDING:
            raise WhatIfError(f'{field}: must be "priority" or "fair"')
        p["lending"] = value
    for name, value in changes.get("over_quota_weights", {}).items():
        field = f"changes.over_quota_weights.{name}"
        _known(name, policy_by, field, "policy")["over_quota_weight"] = plain(_milli(value, field))
    for name, value in changes.get("time_weights", {}).items():
        field = f"changes.time_weights.{name}"
        _known(name, profile_by, field, "profile")["time_weight"] = plain(_milli(value, field))
    for name, value in changes.get("pool_order", {}).items():
        field = f"changes.pool_order.{name}"
        f = _known(name, profile_by, field, "profile")
        f["pools"] = _order(value, list(f.get("pools") or []), field)
    for name, value in changes.get("capacities", {}).items():
        field = f"changes.capacities.{name}"
        p = _known(name, pool_by, field, "pool")
        if "cloud" in p:
            raise WhatIfError(f"{field}: a cloud pool's capacity is its instance types' maximum")
        p["capacity"] = plain(_gpus(value, field))

    out["policies"], out["pools"], out["profiles"] = policies, pools, profiles
    events, kept = _events(scenario.get("events", []), changes)
    if "events" in scenario:
        out["events"] = events
    try:
        return out, parse(out)
    except ScenarioError as e:
        raise WhatIfError(_blame(str(e), changes, out, kept)) from None


def _items(scenario: dict, key: str) -> list:
    v = scenario.get(key, [])
    if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
        raise WhatIfError(f"scenario.{key}: must be a list of objects")
    return v


def _events(events, changes: dict) -> tuple[list, list[int]]:
    """The events without the set_* events of changed fields, and each kept one's old index."""
    if not isinstance(events, list):
        return events, []
    drop = {(kind, name) for key, (kind, _) in DROPPED.items() for name in changes.get(key, {})}
    target = dict(DROPPED.values())
    kept, index = [], []
    for i, e in enumerate(events):
        kind = next((k for k in target if k in e), None) if drop and isinstance(e, dict) else None
        if kind and isinstance(e[kind], dict) and (kind, e[kind].get(target[kind])) in drop:
            continue
        kept.append(e)
        index.append(i)
    return kept, index


def _blame(message: str, changes: dict, out: dict, kept: list[int]) -> str:
    """Name the change that made the scenario bad, as far as the message tells."""
    names = re.findall(r"'([^']*)'", message)
    m = re.match(r"events\[(\d+)\]", message)
    if m and int(m.group(1)) < len(kept):
        event = out["events"][int(m.group(1))]
        names += [b.get("policy") or b.get("pool") for b in event.values() if isinstance(b, dict)]
        message = f"events[{kept[int(m.group(1))]}]" + message[m.end() :]
    m = re.match(r"(policies|profiles|pools)\[(\d+)\]", message)
    if m:
        items = out.get(m.group(1), [])
        if int(m.group(2)) < len(items):
            names.insert(0, items[int(m.group(2))].get("name"))
    for name in names:
        for key in BLAME_ORDER:
            if name in changes.get(key, {}):
                return f"changes.{key}.{name}: the changed scenario is refused: {message}"
    return f"changes: the changed scenario is refused: {message}"


def _known(name, by: dict, field: str, kind: str) -> dict:
    if name not in by:
        raise WhatIfError(f"{field}: unknown {kind}")
    return by[name]


def number(v) -> Decimal | None:
    if isinstance(v, bool) or not isinstance(v, int | float | Decimal):
        return None
    d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    return d if d.is_finite() else None


def _amount(v, field: str, step: Decimal, unit: str) -> Decimal:
    d = number(v)
    if d is None:
        raise WhatIfError(f"{field}: must be a number")
    if d < 0:
        raise WhatIfError(f"{field}: must be >= 0, got {plain(d)}")
    if d >= AMOUNT_MAX:
        raise WhatIfError(f"{field}: must be below {AMOUNT_MAX:,}")
    if d % step:
        raise WhatIfError(f"{field}: must be a multiple of {unit}")
    return d


def _gpus(v, field: str) -> Decimal:
    return _amount(v, field, Decimal("0.001"), "0.001 GPU")


def _milli(v, field: str) -> Decimal:
    return _amount(v, field, Decimal("0.001"), "0.001")


def _windows(v, field: str) -> list[dict]:
    """One window, or a list of them ([] = no budget): a time window {hours, period} or a money
    window {amount, currency, period}; at most one of each kind per period."""
    items = [v] if isinstance(v, dict) else v
    if not isinstance(items, list):
        raise WhatIfError(f"{field}: must be an object {{hours, period}} or a list of them")
    windows, seen = [], []
    for i, w in enumerate(items):
        f = field if isinstance(v, dict) else f"{field}[{i}]"
        if not isinstance(w, dict):
            raise WhatIfError(f"{f}: must be an object {{hours, period}}")
        keys = ("amount", "currency", "period") if "amount" in w else ("hours", "period")
        for key in w:
            if key not in keys:
                raise WhatIfError(f"{f}.{key}: unknown field")
        for key in keys:
            if key not in w:
                raise WhatIfError(f"{f}.{key}: required")
        if w["period"] not in PERIODS:
            raise WhatIfError(f"{f}.period: must be one of {', '.join(PERIODS)}")
        kind = (keys[0], w["period"])
        if kind in seen:
            raise WhatIfError(
                f"{f}.period: a policy has one {'money' if 'amount' in w else 'time'} window per period"
            )
        seen.append(kind)
        if "amount" in w:
            amount = _amount(w["amount"], f"{f}.amount", Decimal("0.0001"), "0.0001")
            if not isinstance(w["currency"], str) or not CURRENCY.fullmatch(w["currency"]):
                raise WhatIfError(f"{f}.currency: must be a three-letter ISO 4217 code in capitals, e.g. EUR")
            windows.append({"amount": plain(amount), "currency": w["currency"], "period": w["period"]})
        else:
            hours = _amount(w["hours"], f"{f}.hours", Decimal("0.000001"), "0.000001 hour")
            windows.append({"hours": plain(hours), "period": w["period"]})
    return windows


def _order(v, pools: list, field: str) -> list[str]:
    if not isinstance(v, list) or not all(isinstance(p, str) for p in v):
        raise WhatIfError(f"{field}: must be a list of pool names")
    for i, p in enumerate(v):
        if p not in pools:
            raise WhatIfError(f"{field}[{i}]: pool {p!r} is not in the profile's pools ({', '.join(pools)})")
    if len(set(v)) != len(v) or len(v) != len(pools):
        raise WhatIfError(f"{field}: must list each of the profile's pools ({', '.join(pools)}) once")
    return list(v)


def plain(v):
    """JSON-ready: Decimals as int when whole, else float; dicts and lists recursively."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [plain(x) for x in v]
    return v


def _g(d: Decimal) -> str:
    return f"{plain(d)} GPU" + ("" if d == 1 else "s")
