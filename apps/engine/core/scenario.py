"""Simulator scenarios (DESIGN section 5): parsed strictly into exact integer units.

Every problem raises ScenarioError naming the field, e.g. `policies[1].limit: 2 GPUs is below
the reservation of 4 GPUs`. Numbers are read as decimals, so 0.1 s or 0.25 GPU stay exact.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from .budget import US_PER_S, hours_to_units
from .snapshot import PERIODS

MILLI = 1000
MAX_LIMIT_US = 30 * 24 * 3600 * US_PER_S
LIVE_IDLE_LIMITS = ("cpu_idle_s", "gpu_idle_s", "net_idle_s", "jupyter_idle_s")
TASK_KINDS = ("batch", "session")


class ScenarioError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class InstanceTypeSpec:
    """A cloud pool's machine: `gpus` per node in milli-GPUs (whole GPUs), at most `max` at once."""

    name: str
    gpus: int
    max: int
    spot: bool
    spot_available: bool


@dataclass(frozen=True, slots=True)
class CloudSpec:
    boot_us: int
    idle_timeout_us: int
    types: tuple[InstanceTypeSpec, ...]

    @property
    def maximum(self) -> int:
        return sum(t.gpus * t.max for t in self.types)

    @property
    def largest(self) -> int:
        return max(t.gpus for t in self.types)


@dataclass(frozen=True, slots=True)
class PoolSpec:
    name: str
    capacity: int
    gpu_type: str | None
    cloud: CloudSpec | None = None


@dataclass(frozen=True, slots=True)
class IdleLimitsSpec:
    """A session's idle limits in microseconds, None = off: stop this long after its start
    (`max_lifetime_us`), or after it has been not busy this long without a break (`idle_us`)."""

    max_lifetime_us: int | None = None
    idle_us: int | None = None


NO_LIMITS = IdleLimitsSpec()


@dataclass(frozen=True, slots=True)
class ProfileSpec:
    name: str
    size: int
    time_weight: int
    pools: tuple[str, ...]
    size_from_task: bool
    idle_limits: IdleLimitsSpec = NO_LIMITS
    min_runtime_s: int = 0


@dataclass(frozen=True, slots=True)
class PolicySpec:
    """`budgets`: (period, budget units) per time budget window, in the order given."""

    name: str
    parent: str | None
    reservation: int
    limit: int
    budgets: tuple[tuple[str, int], ...] = ()
    max_preemptions_per_hour: int | None = None


@dataclass(frozen=True, slots=True)
class ResourceSpec:
    """`idle_limits`: the sessions' limits in force, each the resource's own or else its profile's."""

    name: str
    policy: str
    profile: str
    idle_limits: IdleLimitsSpec = NO_LIMITS


@dataclass(frozen=True, slots=True)
class Submit:
    """`duration_us` None: a session that runs until stopped. `activity`: a session's
    (offset from its start, busy) entries, offsets increasing."""

    id: str
    resource: str
    size: int
    duration_us: int | None
    checkpoint: bool
    kind: str = "batch"
    activity: tuple[tuple[int, bool], ...] = ()


@dataclass(frozen=True, slots=True)
class Change:
    """cancel (target = task id), set_budget / set_capacity / set_reservation / set_limit
    (target = policy or pool, value in budget units or milli-GPUs), engine (value 1 = enable).
    `period`: the budget window a set_budget changes."""

    kind: str
    target: str | None
    value: int
    period: str | None = None


@dataclass(frozen=True, slots=True)
class Event:
    at_us: int
    what: Submit | Change


@dataclass(frozen=True)
class Scenario:
    start: datetime
    duration_us: int
    step_us: int
    low_watermark_s: int
    pools: tuple[PoolSpec, ...]
    profiles: tuple[ProfileSpec, ...]
    policies: tuple[PolicySpec, ...]
    resources: tuple[ResourceSpec, ...]
    execution_order: dict[str, tuple[str, ...]]
    queuing_order: dict[str, tuple[str, ...]]
    events: tuple[Event, ...]


EVENT_KINDS = ("submit", "cancel", "set_budget", "set_capacity", "set_reservation", "set_limit", "engine")


def loads(text: str) -> Scenario:
    try:
        data = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as e:
        raise ScenarioError(f"JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise ScenarioError("JSON: nested too deeply") from None
    return parse(data)


def parse(data) -> Scenario:
    top = _object(
        data,
        "scenario",
        ("start", "duration_s", "pools", "profiles", "policies", "compute_resources"),
        ("pass_interval_s", "low_watermark_s", "execution_order", "queuing_order", "events", "description"),
    )
    start = _start(top["start"])
    duration_us = _us(top["duration_s"], "duration_s")
    step_us = _us(top.get("pass_interval_s", 1), "pass_interval_s")
    if step_us <= 0:
        raise ScenarioError("pass_interval_s: must be > 0")
    low_watermark = top.get("low_watermark_s", 900)
    if not isinstance(low_watermark, int) or isinstance(low_watermark, bool) or low_watermark < 0:
        raise ScenarioError("low_watermark_s: must be a whole number of seconds >= 0")

    pools = tuple(_pool(v, f"pools[{i}]") for i, v in enumerate(_list(top["pools"], "pools")))
    pool_names = _names(pools, "pools")
    profiles = tuple(
        _profile(v, f"profiles[{i}]", pool_names) for i, v in enumerate(_list(top["profiles"], "profiles"))
    )
    profile_by = {f.name: f for f in profiles}
    _names(profiles, "profiles")
    _check_nodes(profiles, pools)
    policies = tuple(_policy(v, f"policies[{i}]") for i, v in enumerate(_list(top["policies"], "policies")))
    policy_by = {p.name: p for p in policies}
    _names(policies, "policies")
    _check_parents(policies, policy_by)
    resources = tuple(
        _resource(v, f"compute_resources[{i}]", policy_by, profile_by)
        for i, v in enumerate(_list(top["compute_resources"], "compute_resources"))
    )
    _names(resources, "compute_resources")

    execution_order = _order(
        top.get("execution_order", {}),
        "execution_order",
        {p.name: [f.name for f in profiles if p.name in f.pools] for p in pools},
        "pool",
        "profile",
        set(profile_by),
        must_use=True,
    )
    connected = {(r.policy, r.profile) for r in resources}
    queuing_order = _order(
        top.get("queuing_order", {}),
        "queuing_order",
        {f.name: [p.name for p in policies if (p.name, f.name) in connected] for f in profiles},
        "profile",
        "policy",
        set(policy_by),
        must_use=False,
    )
    events = _events(top.get("events", []), pools, profile_by, policies, {r.name: r for r in resources})
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
    )


# -- objects --------------------------------------------------------------------------------


def _pool(v, field: str) -> PoolSpec:
    cloud = isinstance(v, dict) and "cloud" in v
    o = _object(v, field, ("name",) if cloud else ("name", "capacity"), ("capacity", "gpu_type", "cloud"))
    name = _name(o["name"], f"{field}.name")
    gpu_type = o.get("gpu_type")
    if gpu_type is not None:
        gpu_type = _name(gpu_type, f"{field}.gpu_type")
    if not cloud:
        return PoolSpec(name, _gpus(o["capacity"], f"{field}.capacity"), gpu_type)
    spec = _cloud(o["cloud"], f"{field}.cloud")
    if "capacity" in o:
        given = _gpus(o["capacity"], f"{field}.capacity")
        if given != spec.maximum:
            raise ScenarioError(
                f"{field}.capacity: a cloud pool's capacity is its types' maximum (sum of max x gpus: "
                f"{_g(spec.maximum)}), got {_g(given)}; leave it out"
            )
    return PoolSpec(name, spec.maximum, gpu_type, spec)


def _cloud(v, field: str) -> CloudSpec:
    o = _object(v, field, ("boot_s", "idle_timeout_s", "types"), ())
    boot = _us(o["boot_s"], f"{field}.boot_s")
    idle = _us(o["idle_timeout_s"], f"{field}.idle_timeout_s")
    if idle <= 0:
        raise ScenarioError(f"{field}.idle_timeout_s: must be > 0")
    items = _list(o["types"], f"{field}.types")
    if not items:
        raise ScenarioError(f"{field}.types: needs at least one instance type")
    types = tuple(_instance_type(t, f"{field}.types[{i}]") for i, t in enumerate(items))
    _names(types, f"{field}.types")
    return CloudSpec(boot, idle, types)


def _instance_type(v, field: str) -> InstanceTypeSpec:
    o = _object(v, field, ("name", "gpus", "max"), ("spot", "spot_available"))
    gpus = _gpus(o["gpus"], f"{field}.gpus")
    if gpus < MILLI or gpus % MILLI:
        raise ScenarioError(f"{field}.gpus: must be a whole number of GPUs >= 1, got {o['gpus']}")
    most = o["max"]
    if not isinstance(most, int) or isinstance(most, bool) or most < 1:
        raise ScenarioError(f"{field}.max: must be a whole number >= 1")
    return InstanceTypeSpec(
        _name(o["name"], f"{field}.name"),
        gpus,
        most,
        _bool(o.get("spot", True), f"{field}.spot"),
        _bool(o.get("spot_available", True), f"{field}.spot_available"),
    )


def _check_nodes(profiles: tuple[ProfileSpec, ...], pools: tuple[PoolSpec, ...]) -> None:
    """A task runs on one node: a fixed-size profile must fit the largest type of its cloud pools."""
    by = {p.name: p for p in pools}
    for i, f in enumerate(profiles):
        if f.size_from_task:
            continue
        for j, name in enumerate(f.pools):
            cloud = by[name].cloud
            if cloud is not None and f.size > cloud.largest:
                raise ScenarioError(
                    f"profiles[{i}].pools[{j}]: profile {f.name!r} ({_g(f.size)}) does not fit one node of "
                    f"cloud pool {name!r} (its largest type has {_g(cloud.largest)})"
                )


def _profile(v, field: str, pool_names: set[str]) -> ProfileSpec:
    o = _object(
        v, field, ("name", "gpus", "pools"), ("time_weight", "size_from_task", "idle_limits", "min_runtime_s")
    )
    pools = tuple(_name(p, f"{field}.pools[{i}]") for i, p in enumerate(_list(o["pools"], f"{field}.pools")))
    for i, p in enumerate(pools):
        if p not in pool_names:
            raise ScenarioError(f"{field}.pools[{i}]: unknown pool {p!r}")
    if len(set(pools)) != len(pools):
        raise ScenarioError(f"{field}.pools: a pool is listed twice")
    return ProfileSpec(
        _name(o["name"], f"{field}.name"),
        _size(o["gpus"], f"{field}.gpus"),
        _milli(o.get("time_weight", 1), f"{field}.time_weight"),
        pools,
        _bool(o.get("size_from_task", False), f"{field}.size_from_task"),
        _idle_limits(o.get("idle_limits"), f"{field}.idle_limits", NO_LIMITS),
        _count(o.get("min_runtime_s", 0), f"{field}.min_runtime_s"),
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
    o = _object(v, field, (), ("max_lifetime_s", "idle_s"))
    limits = {}
    for key in ("max_lifetime_s", "idle_s"):
        if o.get(key) is None:
            continue
        us = _us(o[key], f"{field}.{key}")
        if not 0 < us <= MAX_LIMIT_US:
            raise ScenarioError(f"{field}.{key}: must be > 0 and at most 30 days (2592000 s)")
        limits[key] = us
    return IdleLimitsSpec(
        limits.get("max_lifetime_s", default.max_lifetime_us), limits.get("idle_s", default.idle_us)
    )


def _policy(v, field: str) -> PolicySpec:
    optional = ("parent", "budget", "budgets", "max_preemptions_per_hour")
    o = _object(v, field, ("name", "reservation", "limit"), optional)
    reservation = _gpus(o["reservation"], f"{field}.reservation")
    limit = _gpus(o["limit"], f"{field}.limit")
    if limit < reservation:
        raise ScenarioError(f"{field}.limit: {_g(limit)} is below the reservation of {_g(reservation)}")
    parent = o.get("parent")
    if parent is not None:
        parent = _name(parent, f"{field}.parent")
    if o.get("budget") is not None and o.get("budgets") is not None:
        raise ScenarioError(f"{field}.budgets: give budget (one window) or budgets (a list), not both")
    if o.get("budget") is not None:
        budgets = (_window(o["budget"], f"{field}.budget"),)
    else:
        items = _list(o.get("budgets") or [], f"{field}.budgets")
        budgets = tuple(_window(b, f"{field}.budgets[{i}]") for i, b in enumerate(items))
        periods = [period for period, _ in budgets]
        for i, period in enumerate(periods):
            if period in periods[:i]:
                raise ScenarioError(f"{field}.budgets[{i}].period: a policy has one window per period")
    cap = o.get("max_preemptions_per_hour")
    if cap is not None:
        cap = _count(cap, f"{field}.max_preemptions_per_hour")
    return PolicySpec(_name(o["name"], f"{field}.name"), parent, reservation, limit, budgets, cap)


def _window(v, field: str) -> tuple[str, int]:
    b = _object(v, field, ("hours", "period"), ())
    hours = _hours(b["hours"], f"{field}.hours")
    if b["period"] not in PERIODS:
        raise ScenarioError(f"{field}.period: must be one of {', '.join(PERIODS)}")
    return b["period"], hours


def _count(v, field: str) -> int:
    """A whole number >= 0 (seconds or a count)."""
    if isinstance(v, bool) or not isinstance(v, int | Decimal) or v < 0 or v != int(v):
        raise ScenarioError(f"{field}: must be a whole number >= 0")
    return int(v)


def _check_parents(policies: tuple[PolicySpec, ...], by: dict[str, PolicySpec]) -> None:
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


def _resource(
    v, field: str, policies: dict[str, PolicySpec], profiles: dict[str, ProfileSpec]
) -> ResourceSpec:
    o = _object(v, field, ("name", "policy", "profile"), ("idle_limits",))
    r = ResourceSpec(
        _name(o["name"], f"{field}.name"),
        _name(o["policy"], f"{field}.policy"),
        _name(o["profile"], f"{field}.profile"),
    )
    if r.policy not in policies:
        raise ScenarioError(f"{field}.policy: unknown policy {r.policy!r}")
    if r.profile not in profiles:
        raise ScenarioError(f"{field}.profile: unknown profile {r.profile!r}")
    if "idle_limits" in o:
        own = _idle_limits(o["idle_limits"], f"{field}.idle_limits", profiles[r.profile].idle_limits)
        r = ResourceSpec(r.name, r.policy, r.profile, own)
    else:
        r = ResourceSpec(r.name, r.policy, r.profile, profiles[r.profile].idle_limits)
    profile, policy = profiles[r.profile], policies[r.policy]
    if profile.size > policy.limit:
        raise ScenarioError(
            f"{field}.profile: profile {profile.name!r} ({_g(profile.size)}) is larger than the limit "
            f"({_g(policy.limit)}) of policy {policy.name!r}"
        )
    return r


def _order(
    v, field: str, default: dict[str, list[str]], key_kind: str, kind: str, known: set[str], must_use: bool
) -> dict[str, tuple[str, ...]]:
    """An order per key: the names given first, then the others in the order they are listed."""
    o = _object(v, field, (), tuple(default), unknown=f"unknown {key_kind}")
    result = {}
    for key, others in default.items():
        given = tuple(
            _name(n, f"{field}.{key}[{i}]") for i, n in enumerate(_list(o.get(key, []), f"{field}.{key}"))
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


def _events(v, pools, profiles, policies, resources) -> tuple[Event, ...]:
    """Parse the events, then replay the changes in time order to check each against the state
    it meets (limit >= reservation, profile sizes within limits, cancels of submitted tasks)."""
    items = _list(v, "events")
    parsed = []
    for i, e in enumerate(items):
        field = f"events[{i}]"
        o = _object(e, field, ("at",), EVENT_KINDS)
        kinds = [k for k in EVENT_KINDS if k in o]
        if len(kinds) != 1:
            raise ScenarioError(f"{field}: needs exactly one of {', '.join(EVENT_KINDS)}")
        kind = kinds[0]
        parsed.append((_us(o["at"], f"{field}.at"), i, kind, o[kind], f"{field}.{kind}"))
    parsed.sort(key=lambda x: (x[0], x[1]))

    capacity = {p.name: p.capacity for p in pools}
    cloud = {p.name: p.cloud for p in pools if p.cloud is not None}
    reservation = {p.name: p.reservation for p in policies}
    limit = {p.name: p.limit for p in policies}
    windows = {p.name: [period for period, _ in p.budgets] for p in policies}
    submitted: set[str] = set()
    events = []
    for at_us, _, kind, body, field in parsed:
        if kind == "submit":
            what = _submit(body, field, resources, profiles, limit, submitted, cloud)
            submitted.add(what.id)
        elif kind == "cancel":
            task = _name(body, field)
            if task not in submitted:
                raise ScenarioError(f"{field}: unknown task {task!r} (not submitted before this time)")
            what = Change("cancel", task, 0)
        elif kind == "engine":
            if body not in ("disable", "enable"):
                raise ScenarioError(f'{field}: must be "disable" or "enable"')
            what = Change("engine", None, 1 if body == "enable" else 0)
        elif kind == "set_capacity":
            o = _object(body, field, ("pool", "capacity"), ())
            pool = _known(o["pool"], f"{field}.pool", capacity, "pool")
            if pool in cloud:
                raise ScenarioError(
                    f"{field}.pool: {pool!r} is a cloud pool: its capacity is its types' maximum"
                )
            what = Change(kind, pool, _gpus(o["capacity"], f"{field}.capacity"))
        elif kind == "set_budget":
            o = _object(body, field, ("policy", "hours"), ("period",))
            policy = _known(o["policy"], f"{field}.policy", limit, "policy")
            if not windows[policy]:
                raise ScenarioError(f"{field}.policy: policy {policy!r} has no budget to change")
            period = o.get("period")
            if period is None:
                if len(windows[policy]) > 1:
                    raise ScenarioError(
                        f"{field}.period: policy {policy!r} has several budget windows "
                        f"({', '.join(windows[policy])}); name the one to change"
                    )
                period = windows[policy][0]
            elif period not in windows[policy]:
                raise ScenarioError(f"{field}.period: policy {policy!r} has no {period!r} budget window")
            what = Change(kind, policy, _hours(o["hours"], f"{field}.hours"), period)
        else:
            key = kind.removeprefix("set_")
            o = _object(body, field, ("policy", key), ())
            policy = _known(o["policy"], f"{field}.policy", limit, "policy")
            amount = _gpus(o[key], f"{field}.{key}")
            new_res = amount if key == "reservation" else reservation[policy]
            new_lim = amount if key == "limit" else limit[policy]
            if new_lim < new_res:
                raise ScenarioError(
                    f"{field}.{key}: limit {_g(new_lim)} would be below the reservation {_g(new_res)}"
                )
            for r in resources.values():
                if r.policy == policy and profiles[r.profile].size > new_lim:
                    raise ScenarioError(
                        f"{field}.{key}: profile {r.profile!r} ({_g(profiles[r.profile].size)}) would be "
                        f"larger than the limit ({_g(new_lim)}) of policy {policy!r}"
                    )
            reservation[policy], limit[policy] = new_res, new_lim
            what = Change(kind, policy, amount)
        events.append(Event(at_us, what))
    return tuple(events)


def _submit(body, field, resources, profiles, limit, submitted, cloud) -> Submit:
    o = _object(
        body,
        field,
        ("id", "resource"),
        ("duration_s", "gpus", "user", "project", "checkpoint", "kind", "activity"),
    )
    kind = o.get("kind", "batch")
    if kind not in TASK_KINDS:
        raise ScenarioError(f'{field}.kind: must be "batch" or "session"')
    if kind == "batch":
        if "duration_s" not in o:
            raise ScenarioError(f"{field}.duration_s: required")
        if "activity" in o:
            raise ScenarioError(f'{field}.activity: only a task of kind "session" has an activity profile')
    elif "checkpoint" in o:
        raise ScenarioError(f"{field}.checkpoint: a session is never requeued, so it takes no checkpoint")
    task = _name(o["id"], f"{field}.id")
    if task in submitted:
        raise ScenarioError(f"{field}.id: task {task!r} is submitted twice")
    resource = _known(o["resource"], f"{field}.resource", resources, "compute resource")
    profile = profiles[resources[resource].profile]
    size = profile.size
    if "gpus" in o:
        size = _size(o["gpus"], f"{field}.gpus")
        if not profile.size_from_task and size != profile.size:
            raise ScenarioError(
                f"{field}.gpus: profile {profile.name!r} has a fixed size of {_g(profile.size)}"
            )
    if profile.size_from_task and size <= 0:
        raise ScenarioError(f"{field}.gpus: must be > 0")
    policy = resources[resource].policy
    if size > limit[policy]:
        raise ScenarioError(
            f"{field}.gpus: {_g(size)} is larger than the limit ({_g(limit[policy])}) of policy {policy!r}"
        )
    for name in profile.pools:
        if name in cloud and size > cloud[name].largest:
            raise ScenarioError(
                f"{field}.gpus: {_g(size)} do not fit one node of cloud pool {name!r} (its largest "
                f"type has {_g(cloud[name].largest)})"
            )
    for key in ("user", "project"):
        if key in o:
            _name(o[key], f"{field}.{key}")
    duration = None
    if kind == "batch" or o.get("duration_s") is not None:
        duration = _us(o["duration_s"], f"{field}.duration_s")
    if kind == "session" and duration == 0:
        raise ScenarioError(
            f"{field}.duration_s: must be > 0 for a session (left out: it runs until stopped)"
        )
    return Submit(
        task,
        resource,
        size,
        duration,
        _bool(o.get("checkpoint", False), f"{field}.checkpoint"),
        kind,
        _activity(o.get("activity", []), f"{field}.activity"),
    )


def _activity(v, field: str) -> tuple[tuple[int, bool], ...]:
    """`[[at_s, busy], ...]`, at_s from the session's start and increasing."""
    entries = []
    for i, e in enumerate(_list(v, field)):
        if not isinstance(e, list) or len(e) != 2:
            raise ScenarioError(f"{field}[{i}]: must be a pair [at_s, busy]")
        at = _us(e[0], f"{field}[{i}][0]")
        if entries and at <= entries[-1][0]:
            raise ScenarioError(f"{field}[{i}][0]: must be later than the entry before")
        entries.append((at, _bool(e[1], f"{field}[{i}][1]")))
    return tuple(entries)


# -- values ---------------------------------------------------------------------------------


def _object(
    v, field: str, required: tuple[str, ...], optional: tuple[str, ...], unknown: str = "unknown field"
):
    if not isinstance(v, dict):
        raise ScenarioError(f"{field}: must be an object")
    for key in required:
        if key not in v:
            raise ScenarioError(f"{field}.{key}: required")
    for key in v:
        if key not in required and key not in optional:
            raise ScenarioError(f"{field}.{key}: {unknown}")
    return v


def _list(v, field: str) -> list:
    if not isinstance(v, list):
        raise ScenarioError(f"{field}: must be a list")
    return v


def _name(v, field: str) -> str:
    if not isinstance(v, str) or not v:
        raise ScenarioError(f"{field}: must be a non-empty string")
    return v


def _known(v, field: str, names, kind: str) -> str:
    name = _name(v, field)
    if name not in names:
        raise ScenarioError(f"{field}: unknown {kind} {name!r}")
    return name


def _bool(v, field: str) -> bool:
    if not isinstance(v, bool):
        raise ScenarioError(f"{field}: must be true or false")
    return v


def _decimal(v, field: str) -> Decimal:
    if isinstance(v, float):
        v = Decimal(repr(v))
    if isinstance(v, bool) or not isinstance(v, int | Decimal) or not Decimal(v).is_finite():
        raise ScenarioError(f"{field}: must be a number")
    d = Decimal(v)
    if d < 0:
        raise ScenarioError(f"{field}: must be >= 0, got {v}")
    return d


def _scaled(v, field: str, scale: int, unit: str) -> int:
    d = _decimal(v, field) * scale
    if d != d.to_integral_value():
        raise ScenarioError(f"{field}: must be a multiple of {unit}")
    return int(d)


def _gpus(v, field: str) -> int:
    return _scaled(v, field, MILLI, "0.001 GPU")


def _size(v, field: str) -> int:
    """A GPU size: a fraction in (0, 1) or a whole number of GPUs, as the domain's rule."""
    size = _gpus(v, field)
    if size > MILLI and size % MILLI:
        raise ScenarioError(f"{field}: above 1 a GPU size must be whole, got {_g(size)}")
    return size


def _milli(v, field: str) -> int:
    return _scaled(v, field, MILLI, "0.001")


def _us(v, field: str) -> int:
    return _scaled(v, field, US_PER_S, "1 microsecond")


def _hours(v, field: str) -> int:
    return hours_to_units(_decimal(v, field))


def _start(v) -> datetime:
    if not isinstance(v, str):
        raise ScenarioError("start: must be an ISO time string")
    try:
        start = datetime.fromisoformat(v)
    except ValueError:
        raise ScenarioError(f"start: {v!r} is not an ISO time") from None
    if start.tzinfo is None:
        raise ScenarioError("start: needs a UTC offset, e.g. 2025-01-06T00:00:00Z")
    return start.astimezone(UTC)


def _names(items, field: str) -> set[str]:
    seen = set()
    for i, item in enumerate(items):
        if item.name in seen:
            raise ScenarioError(f"{field}[{i}].name: {item.name!r} is used twice")
        seen.add(item.name)
    return seen


def _g(milli: int) -> str:
    whole, frac = divmod(milli, MILLI)
    text = str(whole) if not frac else f"{whole}.{frac:03d}".rstrip("0")
    return f"{text} GPU" + ("" if milli == MILLI else "s")
