"""Simulator scenarios (DESIGN section 5): `loads(text)` and `parse(data)` read one strictly into
the data model of `scenario_model`, in exact integer units.

Every problem raises ScenarioError naming the field, e.g. `policies[1].limit: 2 GPUs is below
the reservation of 4 GPUs`. Numbers are read as decimals, so 0.1 s or 0.25 GPU stay exact.
"""

from __future__ import annotations

import json
from decimal import Decimal

from .scenario_estate import (
    check_nodes,
    check_parents,
    parse_order,
    parse_policy,
    parse_pool,
    parse_profile,
    parse_resource,
)
from .scenario_events import parse_events
from .scenario_model import Scenario, ScenarioError
from .scenario_money import check_currencies, parse_prices
from .scenario_values import read_list, read_object, read_start, read_us, unique_names


def loads(text: str) -> Scenario:
    try:
        data = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as e:
        raise ScenarioError(f"JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ScenarioError("JSON: nested too deeply") from None
    return parse(data)


def parse(data) -> Scenario:
    top = read_object(
        data,
        "scenario",
        ("start", "duration_s", "pools", "profiles", "policies", "compute_resources"),
        (
            "pass_interval_s",
            "low_watermark_s",
            "execution_order",
            "queuing_order",
            "events",
            "description",
            "prices",
        ),
    )
    start = read_start(top["start"])
    duration_us = read_us(top["duration_s"], "duration_s")
    step_us = read_us(top.get("pass_interval_s", 1), "pass_interval_s")
    if step_us <= 0:
        raise ScenarioError("pass_interval_s: must be > 0")
    low_watermark = top.get("low_watermark_s", 900)
    if not isinstance(low_watermark, int) or isinstance(low_watermark, bool) or low_watermark < 0:
        raise ScenarioError("low_watermark_s: must be a whole number of seconds >= 0")

    pools = tuple(parse_pool(v, f"pools[{i}]") for i, v in enumerate(read_list(top["pools"], "pools")))
    pool_names = unique_names(pools, "pools")
    profiles = tuple(
        parse_profile(v, f"profiles[{i}]", pool_names)
        for i, v in enumerate(read_list(top["profiles"], "profiles"))
    )
    profile_by = {f.name: f for f in profiles}
    unique_names(profiles, "profiles")
    check_nodes(profiles, pools)
    policies = tuple(
        parse_policy(v, f"policies[{i}]") for i, v in enumerate(read_list(top["policies"], "policies"))
    )
    policy_by = {p.name: p for p in policies}
    unique_names(policies, "policies")
    check_parents(policies, policy_by)
    prices = parse_prices(top.get("prices", {}), pool_names)
    check_currencies(policies, prices)
    resources = tuple(
        parse_resource(v, f"compute_resources[{i}]", policy_by, profile_by)
        for i, v in enumerate(read_list(top["compute_resources"], "compute_resources"))
    )
    unique_names(resources, "compute_resources")

    execution_order = parse_order(
        top.get("execution_order", {}),
        "execution_order",
        {p.name: [f.name for f in profiles if p.name in f.pools] for p in pools},
        "pool",
        "profile",
        set(profile_by),
        must_use=True,
    )
    connected = {(r.policy, r.profile) for r in resources}
    queuing_order = parse_order(
        top.get("queuing_order", {}),
        "queuing_order",
        {f.name: [p.name for p in policies if (p.name, f.name) in connected] for f in profiles},
        "profile",
        "policy",
        set(policy_by),
        must_use=False,
    )
    events = parse_events(top.get("events", []), pools, profile_by, policies, {r.name: r for r in resources})
    return Scenario(
        start,
        duration_us,
        step_us,
        low_watermark,
        pools,
        profiles,
        policies,
        resources,
        execution_order,
        queuing_order,
        events,
        prices,
    )
