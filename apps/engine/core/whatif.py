"""What-if comparison (docs/whatif.md, "Comparison"): one scenario replayed as recorded and under
IT's changes (`whatif_changes`), side by side. Pure: standard library and the engine core only, so
the CLI and SDK can run it without Django.

    compare(scenario, changes, wait_threshold_s=3600) -> report (JSON-serialisable, stable order)
    to_csv_rows(report) -> [[metric, name, base, changed, difference], ...]
"""

from __future__ import annotations

import math
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from decimal import Decimal

from .budget import UNITS_PER_HOUR
from .scenario import parse
from .scenario_model import Scenario, Submit
from .sim_state import GPU_US_PER_HOUR
from .simulation import Simulation
from .whatif_changes import CHANGE_KINDS, WhatIfError, changed_scenario, number, plain

REASONS = ("budget", "reclaim")
CSV_HEADER = ["metric", "name", "base", "changed", "difference"]
GROUP_METRICS = (
    "tasks",
    "wait_median_s",
    "wait_p95_s",
    "waited_past_threshold",
    "gpu_hours",
    "budget_hours",
)


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
    changed_sc = changed_scenario(scenario, changes)[1]
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
    _align_reasons(sides.values())
    return {
        "wait_threshold_s": plain(number(wait_threshold_s)),
        "changes": plain({k: changes[k] for k in CHANGE_KINDS if k in changes}),
        "base": sides["base"],
        "changed": sides["changed"],
        "difference": _difference(sides["base"], sides["changed"]),
    }


def _align_reasons(sides) -> None:
    """A reason seen on one side only (priority, fair_share) is counted as 0 on the other, so its
    difference is a number."""
    reasons = {r for side in sides for r in side["preemptions"]}
    for side in sides:
        for counts in [side["preemptions"], *(g["preemptions"] for g in side["groups"].values())]:
            missing = reasons - counts.keys()
            if missing:
                merged = counts | dict.fromkeys(missing, 0)
                counts.clear()
                counts.update(sorted(merged.items()))


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
