"""What-if comparison (docs/whatif.md, "Comparison"): one scenario replayed as recorded and under
IT's changes, side by side. Pure: standard library and the engine core only, so the CLI and SDK
can run it without Django.

    apply_changes(scenario, changes) -> scenario with the changes applied (input untouched)
    compare(scenario, changes, wait_threshold_s=3600) -> report (JSON-serialisable, stable order)
    to_csv_rows(report) -> [[metric, name, base, changed, difference], ...]
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from decimal import Decimal

from .budget import UNITS_PER_HOUR
from .scenario import Scenario, ScenarioError, Submit, parse
from .simulator import GPU_US_PER_HOUR, Simulation
from .snapshot import PERIODS

CHANGE_KINDS = ("reservations", "limits", "budgets", "time_weights", "pool_order", "capacities")
REASONS = ("budget", "reclaim")
AMOUNT_MAX = 10**12  # GPUs, hours or a time weight: far above any estate, far below Decimal's limits
CSV_HEADER = ["metric", "name", "base", "changed", "difference"]
GROUP_METRICS = (
    "tasks",
    "wait_median_s",
    "wait_p95_s",
    "waited_past_threshold",
    "gpu_hours",
    "budget_hours",
)
# The set_* events a change replaces: change kind -> (event kind, the event's target key).
DROPPED = {
    "reservations": ("set_reservation", "policy"),
    "limits": ("set_limit", "policy"),
    "budgets": ("set_budget", "policy"),
    "capacities": ("set_capacity", "pool"),
}


class WhatIfError(ValueError):
    """Bad changes; the message names the field, e.g. `changes.reservations.vision: unknown policy`."""


# -- changes --------------------------------------------------------------------------------


def apply_changes(scenario: dict, changes: dict) -> dict:
    """A new scenario dict with `changes` applied to the initial estate; the input is not mutated
    (the new dict shares the unchanged event objects with it). set_* events of a changed field
    (a policy's reservation, limit or budget; a pool's capacity) are dropped."""
    return _apply(scenario, changes)[0]


def _apply(scenario: dict, changes: dict) -> tuple[dict, Scenario]:
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
        _known(name, policy_by, field, "policy")["reservation"] = _plain(_gpus(value, field))
    for name, value in changes.get("limits", {}).items():
        field = f"changes.limits.{name}"
        _known(name, policy_by, field, "policy")["limit"] = _plain(_gpus(value, field))
    for name in dict.fromkeys([*changes.get("reservations", {}), *changes.get("limits", {})]):
        p = policy_by[name]
        res, lim = _number(p.get("reservation", 0)), _number(p.get("limit", 0))
        if lim is not None and res is not None and lim < res:
            if name in changes.get("limits", {}):
                raise WhatIfError(f"changes.limits.{name}: {_g(lim)} is below the reservation of {_g(res)}")
            raise WhatIfError(f"changes.reservations.{name}: {_g(res)} is above the limit of {_g(lim)}")
    for name, value in changes.get("budgets", {}).items():
        field = f"changes.budgets.{name}"
        p = _known(name, policy_by, field, "policy")
        p.pop("budget", None)
        p["budgets"] = _windows(value, field)
    for name, value in changes.get("time_weights", {}).items():
        field = f"changes.time_weights.{name}"
        _known(name, profile_by, field, "profile")["time_weight"] = _plain(_milli(value, field))
    for name, value in changes.get("pool_order", {}).items():
        field = f"changes.pool_order.{name}"
        f = _known(name, profile_by, field, "profile")
        f["pools"] = _order(value, list(f.get("pools") or []), field)
    for name, value in changes.get("capacities", {}).items():
        field = f"changes.capacities.{name}"
        p = _known(name, pool_by, field, "pool")
        if "cloud" in p:
            raise WhatIfError(f"{field}: a cloud pool's capacity is its instance types' maximum")
        p["capacity"] = _plain(_gpus(value, field))

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
        for key in ("limits", "reservations", "budgets", "time_weights", "pool_order", "capacities"):
            if name in changes.get(key, {}):
                return f"changes.{key}.{name}: the changed scenario is refused: {message}"
    return f"changes: the changed scenario is refused: {message}"


def _known(name, by: dict, field: str, kind: str) -> dict:
    if name not in by:
        raise WhatIfError(f"{field}: unknown {kind}")
    return by[name]


def _number(v) -> Decimal | None:
    if isinstance(v, bool) or not isinstance(v, int | float | Decimal):
        return None
    d = Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    return d if d.is_finite() else None


def _amount(v, field: str, step: Decimal, unit: str) -> Decimal:
    d = _number(v)
    if d is None:
        raise WhatIfError(f"{field}: must be a number")
    if d < 0:
        raise WhatIfError(f"{field}: must be >= 0, got {_plain(d)}")
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
    """One window {hours, period}, or a list of them (one per period; [] = no budget)."""
    items = [v] if isinstance(v, dict) else v
    if not isinstance(items, list):
        raise WhatIfError(f"{field}: must be an object {{hours, period}} or a list of them")
    windows, periods = [], []
    for i, w in enumerate(items):
        f = field if isinstance(v, dict) else f"{field}[{i}]"
        if not isinstance(w, dict):
            raise WhatIfError(f"{f}: must be an object {{hours, period}}")
        for key in w:
            if key not in ("hours", "period"):
                raise WhatIfError(f"{f}.{key}: unknown field")
        for key in ("hours", "period"):
            if key not in w:
                raise WhatIfError(f"{f}.{key}: required")
        hours = _amount(w["hours"], f"{f}.hours", Decimal("0.000001"), "0.000001 hour")
        if w["period"] not in PERIODS:
            raise WhatIfError(f"{f}.period: must be one of {', '.join(PERIODS)}")
        if w["period"] in periods:
            raise WhatIfError(f"{f}.period: a policy has one window per period")
        periods.append(w["period"])
        windows.append({"hours": _plain(hours), "period": w["period"]})
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


def _plain(v):
    """JSON-ready: Decimals as int when whole, else float; dicts and lists recursively."""
    if isinstance(v, Decimal):
        return int(v) if v == v.to_integral_value() else float(v)
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def _g(d: Decimal) -> str:
    return f"{_plain(d)} GPU" + ("" if d == 1 else "s")


# -- runs -----------------------------------------------------------------------------------


class _Run(Simulation):
    """The simulator, keeping each budget window's use at the end of each of its periods."""

    def __init__(self, sc: Scenario, end_us: int):
        super().__init__(sc, end_us)
        self.overshoot = {i: [0] * len(ws) for i, ws in self.accounts.items()}

    def _roll_periods(self, t: int) -> None:
        for i, windows in self.accounts.items():
            for k, acc in enumerate(windows):
                if acc.end_us and t >= acc.end_us:
                    used = acc.used(self._enabled_at(acc.end_us, t))
                    self.overshoot[i][k] += max(0, used - acc.limit)
        super()._roll_periods(t)

    def close(self) -> None:
        """The periods open at the end of the run, counted up to it."""
        e_end = self.enabled_clock(self.end_us)
        for i, windows in self.accounts.items():
            for k, acc in enumerate(windows):
                if acc.end_us:
                    self.overshoot[i][k] += max(0, acc.used(e_end) - acc.limit)


def run_side(sc: Scenario, wait_threshold_s: float, progress: Callable[[float], None] | None = None) -> dict:
    """One run's figures (the shape of a report's `base` and `changed`)."""
    sim = _Run(sc, sc.duration_us)
    n_pol = len(sc.policies)
    pol_ix = {p.name: i for i, p in enumerate(sc.policies)}
    cr_pol = {r.name: pol_ix[r.policy] for r in sc.resources}
    task_pol = {e.what.id: cr_pol[e.what.resource] for e in sc.events if isinstance(e.what, Submit)}
    ran: set[str] = set()
    preempted = [dict.fromkeys(REASONS, 0) for _ in range(n_pol)]
    summary = None
    span = max(sc.duration_us, 1) / 1_000_000
    for n, line in enumerate(sim.run()):
        event = line.get("event")
        if event == "placed":
            ran.add(line["task"])
        elif event == "preempted":
            counts = preempted[task_pol[line["task"]]]
            counts[line["reason"]] = counts.get(line["reason"], 0) + 1
        elif "summary" in line:
            summary = line["summary"]
        if progress is not None and n % 20000 == 0 and "at" in line:
            progress(min(1.0, line["at"] / span))
    sim.close()

    chain = []
    for i in range(n_pol):
        up = [i]
        while sc.policies[up[-1]].parent is not None:
            up.append(pol_ix[sc.policies[up[-1]].parent])
        chain.append(up)
    waits: list[list] = [[] for _ in range(n_pol)]
    for task_id, t in summary["tasks"].items():
        if task_id in ran or t["state"] in ("waiting", "placed", "running"):
            for j in chain[task_pol[task_id]]:
                waits[j].append(t["wait_s"])
    subtree_preempted = [dict.fromkeys(REASONS, 0) for _ in range(n_pol)]
    for i in range(n_pol):
        for j in chain[i]:
            for reason, count in preempted[i].items():
                subtree_preempted[j][reason] = subtree_preempted[j].get(reason, 0) + count

    groups = {}
    for i, p in enumerate(sc.policies):
        w = sorted(waits[i])
        groups[p.name] = {
            "tasks": len(w),
            "wait_median_s": _median(w),
            "wait_p95_s": _p95(w),
            "waited_past_threshold": sum(1 for x in w if x > wait_threshold_s),
            "gpu_hours": summary["policies"][p.name]["gpu_hours"],
            "budget_hours": summary["policies"][p.name]["budget_hours"],
            "preemptions": dict(sorted(subtree_preempted[i].items())),
            "budget_overshoot_hours": {
                acc.period: round(sim.overshoot[i][k] / UNITS_PER_HOUR, 6)
                for k, acc in enumerate(sim.accounts.get(i, ()))
            },
        }
    pools = {
        p.name: {
            "utilization": summary["pools"][p.name]["utilization"],
            "gpu_hours": round(sim.pool_area[k] / GPU_US_PER_HOUR, 6),
        }
        for k, p in enumerate(sc.pools)
    }
    totals = dict.fromkeys(REASONS, 0)
    for counts in preempted:
        for reason, count in counts.items():
            totals[reason] = totals.get(reason, 0) + count
    states: dict[str, int] = {}
    for t in summary["tasks"].values():
        states[t["state"]] = states.get(t["state"], 0) + 1
    return {
        "groups": groups,
        "pools": pools,
        "preemptions": dict(sorted(totals.items())),
        "tasks": dict(sorted(states.items())),
    }


def _median(w: list):
    if not w:
        return None
    mid = len(w) // 2
    return w[mid] if len(w) % 2 else _round((w[mid - 1] + w[mid]) / 2)


def _p95(w: list):
    """Nearest rank: the smallest wait with at least 95% of the waits at or below it."""
    return w[math.ceil(0.95 * len(w)) - 1] if w else None


def _round(x):
    return int(x) if x == int(x) else round(x, 6)


def compare(
    scenario: dict,
    changes: dict,
    *,
    wait_threshold_s: float = 3600,
    progress: Callable[[str, float], None] | None = None,
    processes: int = 1,
) -> dict:
    """Run `scenario` as given and with `changes`; both sides and their difference.

    `progress(side, fraction)` ("base" or "changed", 0..1 of the simulated period) is called now
    and then. `processes=2` runs the two sides in two processes at once (not from a daemonic
    process such as a Celery prefork worker; no progress then). Raises WhatIfError for bad
    changes, ScenarioError for a bad scenario."""
    if isinstance(wait_threshold_s, bool) or not isinstance(wait_threshold_s, int | float | Decimal):
        raise WhatIfError("wait_threshold_s: must be a number")
    if wait_threshold_s < 0:
        raise WhatIfError("wait_threshold_s: must be >= 0")
    base_sc = parse(scenario)
    changed_sc = _apply(scenario, changes)[1]
    sides = {}
    if processes > 1:
        with ProcessPoolExecutor(max_workers=2) as pool:
            futures = {
                name: pool.submit(run_side, sc, wait_threshold_s)
                for name, sc in (("base", base_sc), ("changed", changed_sc))
            }
            sides = {name: f.result() for name, f in futures.items()}
    for name, sc in (("base", base_sc), ("changed", changed_sc)):
        if name in sides:
            continue
        tick = None if progress is None else (lambda f, name=name: progress(name, f))
        sides[name] = run_side(sc, wait_threshold_s, tick)
        if progress is not None:
            progress(name, 1.0)
    return {
        "wait_threshold_s": _plain(_number(wait_threshold_s)),
        "changes": _plain({k: changes[k] for k in CHANGE_KINDS if k in changes}),
        "base": sides["base"],
        "changed": sides["changed"],
        "difference": _difference(sides["base"], sides["changed"]),
    }


def _difference(base, changed):
    """changed - base, key by key over the keys of both (None where a side lacks a number)."""
    if isinstance(base, dict) or isinstance(changed, dict):
        base, changed = base or {}, changed or {}
        keys = list(base) + [k for k in changed if k not in base]
        return {k: _difference(base.get(k), changed.get(k)) for k in keys}
    if isinstance(base, int | float) and isinstance(changed, int | float):
        return _round(changed - base)
    return None


# -- CSV ------------------------------------------------------------------------------------


def to_csv_rows(report: dict) -> list[list[str]]:
    """The comparison as CSV rows: a header, then (metric, name, base, changed, difference)."""
    base, changed, diff = report["base"], report["changed"], report["difference"]
    rows = [list(CSV_HEADER)]

    def row(metric, name, path):
        values = [_at(side, path) for side in (base, changed, diff)]
        rows.append([metric, name, *(_cell(v) for v in values)])

    for group in diff["groups"]:
        for metric in GROUP_METRICS:
            row(metric, group, ("groups", group, metric))
        for reason in diff["groups"][group]["preemptions"]:
            row(f"preemptions_{reason}", group, ("groups", group, "preemptions", reason))
        for period in diff["groups"][group]["budget_overshoot_hours"]:
            path = ("groups", group, "budget_overshoot_hours", period)
            row(f"budget_overshoot_hours_{period}", group, path)
    for pool in diff["pools"]:
        for metric in ("utilization", "gpu_hours"):
            row(metric, pool, ("pools", pool, metric))
    for reason in diff["preemptions"]:
        row(f"preemptions_{reason}", "", ("preemptions", reason))
    for state in diff["tasks"]:
        row(f"tasks_{state}", "", ("tasks", state))
    return rows


def _at(side: dict, path: tuple):
    for key in path:
        if not isinstance(side, dict) or key not in side:
            return None
        side = side[key]
    return side


def _cell(v) -> str:
    return "" if v is None else str(v)
