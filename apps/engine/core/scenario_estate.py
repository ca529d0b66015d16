"""The estate of a scenario: pools (cloud pools and their instance types, maintenance windows),
profiles (idle limits, time limits and unlimited_before_maintenance included), policies (time and
money budget windows included: `scenario_money`), compute resources (their own idle and time
limits) and the execution and queuing orders, each parsed and checked against the others.
"""

from __future__ import annotations

from .budget import US_PER_S
from .scenario_model import (
    NO_LIMITS,
    CloudSpec,
    IdleLimitsSpec,
    InstanceTypeSpec,
    PolicySpec,
    PoolSpec,
    ProfileSpec,
    ResourceSpec,
    ScenarioError,
    WindowSpec,
)
from .scenario_money import money_window
from .scenario_values import (
    MILLI,
    gpus_text,
    read_bool,
    read_count,
    read_gpus,
    read_hours,
    read_list,
    read_milli,
    read_name,
    read_object,
    read_size,
    read_time_limit,
    read_us,
    unique_names,
)
from .snapshot import LENDING, PERIODS

MAX_LIMIT_US = 30 * 24 * 3600 * US_PER_S
LIVE_IDLE_LIMITS = ("cpu_idle_s", "gpu_idle_s", "net_idle_s", "jupyter_idle_s")
TIME_LIMITS = ("default_time_limit_s", "max_time_limit_s")


def parse_pool(v, field: str) -> PoolSpec:
    cloud = isinstance(v, dict) and "cloud" in v
    optional = ("capacity", "gpu_type", "cloud", "maintenance")
    o = read_object(v, field, ("name",) if cloud else ("name", "capacity"), optional)
    name = read_name(o["name"], f"{field}.name")
    gpu_type = o.get("gpu_type")
    if gpu_type is not None:
        gpu_type = read_name(gpu_type, f"{field}.gpu_type")
    if not cloud:
        windows = _maintenance(o.get("maintenance", []), f"{field}.maintenance")
        return PoolSpec(name, read_gpus(o["capacity"], f"{field}.capacity"), gpu_type, None, windows)
    if "maintenance" in o:
        raise ScenarioError(f"{field}.maintenance: a cloud pool has no maintenance windows")
    spec = _cloud(o["cloud"], f"{field}.cloud")
    if "capacity" in o:
        given = read_gpus(o["capacity"], f"{field}.capacity")
        if given != spec.maximum:
            raise ScenarioError(
                f"{field}.capacity: a cloud pool's capacity is its types' maximum (sum of max x gpus: "
                f"{gpus_text(spec.maximum)}), got {gpus_text(given)}; leave it out"
            )
    return PoolSpec(name, spec.maximum, gpu_type, spec)


def _maintenance(v, field: str) -> tuple[WindowSpec, ...]:
    """[{start, end, note?}, ...] in seconds from the scenario's start, in any order, not
    overlapping (a window may start where another ends); kept in start order."""
    windows = []
    for i, w in enumerate(read_list(v, field)):
        o = read_object(w, f"{field}[{i}]", ("start", "end"), ("note",))
        start = read_us(o["start"], f"{field}[{i}].start")
        end = read_us(o["end"], f"{field}[{i}].end")
        if end <= start:
            raise ScenarioError(f"{field}[{i}].end: must be after its start")
        note = o.get("note")
        if note is not None and not isinstance(note, str):
            raise ScenarioError(f"{field}[{i}].note: must be a string")
        windows.append((start, i, WindowSpec(start, end, note)))
    windows.sort(key=lambda x: x[:2])
    for (_, j, before), (_, i, w) in zip(windows, windows[1:], strict=False):
        if w.start_us < before.end_us:
            raise ScenarioError(f"{field}[{i}]: overlaps {field}[{j}]")
    return tuple(w for _, _, w in windows)


def _cloud(v, field: str) -> CloudSpec:
    o = read_object(v, field, ("boot_s", "idle_timeout_s", "types"), ())
    boot = read_us(o["boot_s"], f"{field}.boot_s")
    idle = read_us(o["idle_timeout_s"], f"{field}.idle_timeout_s")
    if idle <= 0:
        raise ScenarioError(f"{field}.idle_timeout_s: must be > 0")
    items = read_list(o["types"], f"{field}.types")
    if not items:
        raise ScenarioError(f"{field}.types: needs at least one instance type")
    types = tuple(_instance_type(t, f"{field}.types[{i}]") for i, t in enumerate(items))
    unique_names(types, f"{field}.types")
    return CloudSpec(boot, idle, types)


def _instance_type(v, field: str) -> InstanceTypeSpec:
    o = read_object(v, field, ("name", "gpus", "max"), ("spot", "spot_available"))
    gpus = read_gpus(o["gpus"], f"{field}.gpus")
    if gpus < MILLI or gpus % MILLI:
        raise ScenarioError(f"{field}.gpus: must be a whole number of GPUs >= 1, got {o['gpus']}")
    most = o["max"]
    if not isinstance(most, int) or isinstance(most, bool) or most < 1:
        raise ScenarioError(f"{field}.max: must be a whole number >= 1")
    return InstanceTypeSpec(
        read_name(o["name"], f"{field}.name"),
        gpus,
        most,
        read_bool(o.get("spot", True), f"{field}.spot"),
        read_bool(o.get("spot_available", True), f"{field}.spot_available"),
    )


def check_nodes(profiles: tuple[ProfileSpec, ...], pools: tuple[PoolSpec, ...]) -> None:
    """A task runs on one node: a fixed-size profile must fit the largest type of its cloud pools."""
    by = {p.name: p for p in pools}
    for i, f in enumerate(profiles):
        if f.size_from_task:
            continue
        for j, name in enumerate(f.pools):
            cloud = by[name].cloud
            if cloud is not None and f.size > cloud.largest:
                raise ScenarioError(
                    f"profiles[{i}].pools[{j}]: profile {f.name!r} ({gpus_text(f.size)}) does not fit one "
                    f"node of cloud pool {name!r} (its largest type has {gpus_text(cloud.largest)})"
                )


def parse_profile(v, field: str, pool_names: set[str]) -> ProfileSpec:
    o = read_object(
        v,
        field,
        ("name", "gpus", "pools"),
        (
            "time_weight",
            "size_from_task",
            "idle_limits",
            "min_runtime_s",
            "starvation_s",
            "unlimited_before_maintenance",
            *TIME_LIMITS,
        ),
    )
    pools = tuple(
        read_name(p, f"{field}.pools[{i}]") for i, p in enumerate(read_list(o["pools"], f"{field}.pools"))
    )
    for i, p in enumerate(pools):
        if p not in pool_names:
            raise ScenarioError(f"{field}.pools[{i}]: unknown pool {p!r}")
    if len(set(pools)) != len(pools):
        raise ScenarioError(f"{field}.pools: a pool is listed twice")
    return ProfileSpec(
        read_name(o["name"], f"{field}.name"),
        read_size(o["gpus"], f"{field}.gpus"),
        read_milli(o.get("time_weight", 1), f"{field}.time_weight"),
        pools,
        read_bool(o.get("size_from_task", False), f"{field}.size_from_task"),
        _idle_limits(o.get("idle_limits"), f"{field}.idle_limits", NO_LIMITS),
        read_count(o.get("min_runtime_s", 0), f"{field}.min_runtime_s"),
        None if o.get("starvation_s") is None else read_count(o["starvation_s"], f"{field}.starvation_s"),
        *_time_limits(o, field, (None, None)),
        read_bool(o.get("unlimited_before_maintenance", False), f"{field}.unlimited_before_maintenance"),
    )


def _time_limits(o: dict, field: str, default: tuple) -> tuple[int | None, int | None]:
    """(default_time_limit_s, max_time_limit_s): each given (not null) or else `default`'s."""
    return tuple(
        read_time_limit(o[key], f"{field}.{key}") if o.get(key) is not None else fallback
        for key, fallback in zip(TIME_LIMITS, default, strict=True)
    )


def _idle_limits(v, field: str, default: IdleLimitsSpec) -> IdleLimitsSpec:
    """`{max_lifetime_s?, idle_s?}`; a limit left out or null is `default`'s."""
    if v is None:
        return default
    if isinstance(v, dict):
        for key in v:
            if key in LIVE_IDLE_LIMITS:
                raise ScenarioError(
                    f"{field}.{key}: the simulator has one idle limit, idle_s (a session is busy or "
                    "not: CPU, GPU, network and Jupyter idle all read as not busy)"
                )
    o = read_object(v, field, (), ("max_lifetime_s", "idle_s"))
    limits = {}
    for key in ("max_lifetime_s", "idle_s"):
        if o.get(key) is None:
            continue
        us = read_us(o[key], f"{field}.{key}")
        if not 0 < us <= MAX_LIMIT_US:
            raise ScenarioError(f"{field}.{key}: must be > 0 and at most 30 days (2592000 s)")
        limits[key] = us
    return IdleLimitsSpec(
        limits.get("max_lifetime_s", default.max_lifetime_us), limits.get("idle_s", default.idle_us)
    )


def parse_policy(v, field: str) -> PolicySpec:
    optional = (
        "parent",
        "budget",
        "budgets",
        "max_preemptions_per_hour",
        "lending",
        "over_quota_weight",
        "lendable",
    )
    o = read_object(v, field, ("name", "reservation", "limit"), optional)
    reservation = read_gpus(o["reservation"], f"{field}.reservation")
    limit = read_gpus(o["limit"], f"{field}.limit")
    if limit < reservation:
        raise ScenarioError(
            f"{field}.limit: {gpus_text(limit)} is below the reservation of {gpus_text(reservation)}"
        )
    parent = o.get("parent")
    if parent is not None:
        parent = read_name(parent, f"{field}.parent")
    if o.get("budget") is not None and o.get("budgets") is not None:
        raise ScenarioError(f"{field}.budgets: give budget (one window) or budgets (a list), not both")
    if o.get("budget") is not None:
        items, where = [o["budget"]], [f"{field}.budget"]
    else:
        items = read_list(o.get("budgets") or [], f"{field}.budgets")
        where = [f"{field}.budgets[{i}]" for i in range(len(items))]
    budgets, money = [], []
    for b, at in zip(items, where, strict=True):
        if isinstance(b, dict) and "amount" in b:
            window = money_window(b, at)
            if any(window[0] == m[0] for m in money):
                raise ScenarioError(f"{at}.period: a policy has one money window per period")
            money.append(window)
        else:
            budgets.append(_window(b, at))
            if any(budgets[-1][0] == t[0] for t in budgets[:-1]):
                raise ScenarioError(f"{at}.period: a policy has one window per period")
    cap = o.get("max_preemptions_per_hour")
    if cap is not None:
        cap = read_count(cap, f"{field}.max_preemptions_per_hour")
    lending = o.get("lending", "priority")
    if lending not in LENDING:
        raise ScenarioError(f'{field}.lending: must be "priority" or "fair"')
    lendable = o.get("lendable")
    if lendable is not None:
        lendable = read_gpus(lendable, f"{field}.lendable")
        if lendable > reservation:
            raise ScenarioError(
                f"{field}.lendable: {gpus_text(lendable)} is above the reservation of "
                f"{gpus_text(reservation)}"
            )
    return PolicySpec(
        read_name(o["name"], f"{field}.name"),
        parent,
        reservation,
        limit,
        tuple(budgets),
        cap,
        lending,
        read_milli(o.get("over_quota_weight", 1), f"{field}.over_quota_weight"),
        lendable,
        tuple(money),
    )


def _window(v, field: str) -> tuple[str, int]:
    b = read_object(v, field, ("hours", "period"), ())
    hours = read_hours(b["hours"], f"{field}.hours")
    if b["period"] not in PERIODS:
        raise ScenarioError(f"{field}.period: must be one of {', '.join(PERIODS)}")
    return b["period"], hours


def check_parents(policies: tuple[PolicySpec, ...], by: dict[str, PolicySpec]) -> None:
    for i, p in enumerate(policies):
        if p.parent is not None and p.parent not in by:
            raise ScenarioError(f"policies[{i}].parent: unknown policy {p.parent!r}")
    for i, p in enumerate(policies):
        seen, up = {p.name}, p.parent
        while up is not None:
            if up in seen:
                raise ScenarioError(f"policies[{i}].parent: policy {p.name!r} is its own ancestor")
            seen.add(up)
            up = by[up].parent


def parse_resource(
    v, field: str, policies: dict[str, PolicySpec], profiles: dict[str, ProfileSpec]
) -> ResourceSpec:
    o = read_object(v, field, ("name", "policy", "profile"), ("idle_limits", *TIME_LIMITS))
    name = read_name(o["name"], f"{field}.name")
    policy_name = read_name(o["policy"], f"{field}.policy")
    profile_name = read_name(o["profile"], f"{field}.profile")
    if policy_name not in policies:
        raise ScenarioError(f"{field}.policy: unknown policy {policy_name!r}")
    if profile_name not in profiles:
        raise ScenarioError(f"{field}.profile: unknown profile {profile_name!r}")
    profile, policy = profiles[profile_name], policies[policy_name]
    idle = profile.idle_limits
    if "idle_limits" in o:
        idle = _idle_limits(o["idle_limits"], f"{field}.idle_limits", profile.idle_limits)
    limits = _time_limits(o, field, (profile.default_time_limit_s, profile.max_time_limit_s))
    r = ResourceSpec(name, policy_name, profile_name, idle, *limits)
    if profile.size > policy.limit:
        raise ScenarioError(
            f"{field}.profile: profile {profile.name!r} ({gpus_text(profile.size)}) is larger than the limit "
            f"({gpus_text(policy.limit)}) of policy {policy.name!r}"
        )
    return r


def parse_order(
    v, field: str, default: dict[str, list[str]], key_kind: str, kind: str, known: set[str], must_use: bool
) -> dict[str, tuple[str, ...]]:
    """An order per key: the names given first, then the others in the order they are listed."""
    o = read_object(v, field, (), tuple(default), unknown=f"unknown {key_kind}")
    result = {}
    for key, others in default.items():
        given = tuple(
            read_name(n, f"{field}.{key}[{i}]")
            for i, n in enumerate(read_list(o.get(key, []), f"{field}.{key}"))
        )
        for i, n in enumerate(given):
            if n not in known:
                raise ScenarioError(f"{field}.{key}[{i}]: unknown {kind} {n!r}")
            if must_use and n not in others:
                raise ScenarioError(f"{field}.{key}[{i}]: {kind} {n!r} does not list {key_kind} {key!r}")
        if len(set(given)) != len(given):
            raise ScenarioError(f"{field}.{key}: a {kind} is listed twice")
        result[key] = given + tuple(n for n in others if n not in given)
    return result
