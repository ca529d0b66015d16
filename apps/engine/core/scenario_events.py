"""The events of a scenario: submits (time limits, arrays and dependencies included:
`scenario_deps`), cancels, changes of budget, capacity, reservation or limit, dated quota loans
(`scenario_loans`), and the engine switched off and on. Each is checked against the state it meets,
replayed in time order.
"""

from __future__ import annotations

from decimal import Decimal

from .budget import US_PER_S
from .scenario_deps import ISSUE_35, array_tasks, check_dependencies, read_ids
from .scenario_loans import LoanBook
from .scenario_model import Change, Event, ScenarioError, Submit
from .scenario_values import (
    gpus_text,
    read_bool,
    read_gpus,
    read_hours,
    read_known,
    read_list,
    read_name,
    read_object,
    read_size,
    read_time_limit,
    read_us,
)

EVENT_KINDS = (
    "submit",
    "cancel",
    "set_budget",
    "set_capacity",
    "set_reservation",
    "set_limit",
    "engine",
    "loan",
)
TASK_KINDS = ("batch", "session")
PRIORITY_MAX = 2**31 - 1  # the live Task.priority is a 32-bit integer


def parse_events(v, pools, profiles, policies, resources) -> tuple[Event, ...]:
    """Parse the events, then replay the changes in time order to check each against the state
    it meets (limit >= reservation, profile sizes within limits, cancels of submitted tasks)."""
    items = read_list(v, "events")
    parsed = []
    for i, e in enumerate(items):
        field = f"events[{i}]"
        o = read_object(e, field, ("at",), EVENT_KINDS)
        kinds = [k for k in EVENT_KINDS if k in o]
        if len(kinds) != 1:
            raise ScenarioError(f"{field}: needs exactly one of {', '.join(EVENT_KINDS)}")
        kind = kinds[0]
        parsed.append((read_us(o["at"], f"{field}.at"), i, kind, o[kind], f"{field}.{kind}"))
    parsed.sort(key=lambda x: (x[0], x[1]))

    capacity = {p.name: p.capacity for p in pools}
    cloud = {p.name: p.cloud for p in pools if p.cloud is not None}
    reservation = {p.name: p.reservation for p in policies}
    limit = {p.name: p.limit for p in policies}
    windows = {p.name: [period for period, _ in p.budgets] for p in policies}
    budgets = {p.name: dict(p.budgets) for p in policies}
    loans = LoanBook(policies, resources, profiles, reservation, limit, budgets)
    submitted: set[str] = set()
    arrays: dict[str, tuple[str, ...]] = {}  # an array's id -> its tasks' ids
    fields: dict[str, str] = {}  # a task's id -> the path of its submit
    events = []
    for at_us, _, kind, body, field in parsed:
        loans.due(at_us)
        if kind == "loan":
            events.append(Event(at_us, loans.start(body, field, at_us)))
            continue
        if kind == "submit":
            tasks = _submit(body, field, resources, profiles, limit, submitted, cloud)
            if tasks[0].array is not None:
                arrays[tasks[0].array] = tuple(t.id for t in tasks)
                submitted.add(tasks[0].array)
            for what in tasks:
                submitted.add(what.id)
                fields[what.id] = field
                events.append(Event(at_us, what))
            continue
        if kind == "cancel":
            task = read_name(body, field)
            if task not in submitted:
                raise ScenarioError(f"{field}: unknown task {task!r} (not submitted before this time)")
            events.extend(Event(at_us, Change("cancel", one, 0)) for one in arrays.get(task, (task,)))
            continue
        elif kind == "engine":
            if body not in ("disable", "enable"):
                raise ScenarioError(f'{field}: must be "disable" or "enable"')
            what = Change("engine", None, 1 if body == "enable" else 0)
        elif kind == "set_capacity":
            o = read_object(body, field, ("pool", "capacity"), ())
            pool = read_known(o["pool"], f"{field}.pool", capacity, "pool")
            if pool in cloud:
                raise ScenarioError(
                    f"{field}.pool: {pool!r} is a cloud pool: its capacity is its types' maximum"
                )
            what = Change(kind, pool, read_gpus(o["capacity"], f"{field}.capacity"))
        elif kind == "set_budget":
            o = read_object(body, field, ("policy", "hours"), ("period",))
            policy = read_known(o["policy"], f"{field}.policy", limit, "policy")
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
            what = Change(kind, policy, read_hours(o["hours"], f"{field}.hours"), period)
            budgets[policy][period] = what.value
        else:
            key = kind.removeprefix("set_")
            o = read_object(body, field, ("policy", key), ())
            policy = read_known(o["policy"], f"{field}.policy", limit, "policy")
            amount = read_gpus(o[key], f"{field}.{key}")
            new_res = amount if key == "reservation" else reservation[policy]
            new_lim = amount if key == "limit" else limit[policy]
            if new_lim < new_res:
                raise ScenarioError(
                    f"{field}.{key}: limit {gpus_text(new_lim)} would be below the reservation "
                    f"{gpus_text(new_res)}"
                )
            for r in resources.values():
                if r.policy == policy and profiles[r.profile].size > new_lim:
                    raise ScenarioError(
                        f"{field}.{key}: profile {r.profile!r} ({gpus_text(profiles[r.profile].size)}) would "
                        f"be larger than the limit ({gpus_text(new_lim)}) of policy {policy!r}"
                    )
            reservation[policy], limit[policy] = new_res, new_lim
            what = Change(kind, policy, amount)
        events.append(Event(at_us, what))
    loans.due()
    return check_dependencies(events, fields, arrays)


def _submit(body, field, resources, profiles, limit, submitted, cloud) -> list[Submit]:
    """The submit's task, or its array's tasks ("ID[0]" to "ID[N-1]", in index order)."""
    o = read_object(
        body,
        field,
        ("id", "resource"),
        (
            "duration_s",
            "gpus",
            "user",
            "project",
            "checkpoint",
            "checkpoint_s",
            "kind",
            "activity",
            "priority",
            *ISSUE_35,
        ),
    )
    kind = o.get("kind", "batch")
    if kind not in TASK_KINDS:
        raise ScenarioError(f'{field}.kind: must be "batch" or "session"')
    if kind == "batch":
        if "duration_s" not in o:
            raise ScenarioError(f"{field}.duration_s: required")
        if "activity" in o:
            raise ScenarioError(f'{field}.activity: only a task of kind "session" has an activity profile')
    elif "checkpoint" in o or "checkpoint_s" in o:
        raise ScenarioError(f"{field}.checkpoint: a session is never requeued, so it takes no checkpoint")
    every = None
    if "checkpoint_s" in o:
        every = read_us(o["checkpoint_s"], f"{field}.checkpoint_s")
        if every <= 0 or o.get("checkpoint") is False:
            raise ScenarioError(f"{field}.checkpoint_s: a number of seconds > 0, for a task that checkpoints")
    task = read_name(o["id"], f"{field}.id")
    if task in submitted:
        raise ScenarioError(f"{field}.id: task {task!r} is submitted twice")
    resource = read_known(o["resource"], f"{field}.resource", resources, "compute resource")
    profile = profiles[resources[resource].profile]
    size = profile.size
    if "gpus" in o:
        size = read_size(o["gpus"], f"{field}.gpus")
        if not profile.size_from_task and size != profile.size:
            raise ScenarioError(
                f"{field}.gpus: profile {profile.name!r} has a fixed size of {gpus_text(profile.size)}"
            )
    if profile.size_from_task and size <= 0:
        raise ScenarioError(f"{field}.gpus: must be > 0")
    policy = resources[resource].policy
    if size > limit[policy]:
        raise ScenarioError(
            f"{field}.gpus: {gpus_text(size)} is larger than the limit ({gpus_text(limit[policy])}) of "
            f"policy {policy!r}"
        )
    for name in profile.pools:
        if name in cloud and size > cloud[name].largest:
            raise ScenarioError(
                f"{field}.gpus: {gpus_text(size)} do not fit one node of cloud pool {name!r} (its largest "
                f"type has {gpus_text(cloud[name].largest)})"
            )
    for key in ("user", "project"):
        if key in o:
            read_name(o[key], f"{field}.{key}")
    duration = None
    if kind == "batch" or o.get("duration_s") is not None:
        duration = read_us(o["duration_s"], f"{field}.duration_s")
    if kind == "session" and duration == 0:
        raise ScenarioError(
            f"{field}.duration_s: must be > 0 for a session (left out: it runs until stopped)"
        )
    one = Submit(
        task,
        resource,
        size,
        duration,
        every is not None or read_bool(o.get("checkpoint", False), f"{field}.checkpoint"),
        kind,
        _activity(o.get("activity", []), f"{field}.activity"),
        _priority(o.get("priority", 0), f"{field}.priority"),
        _time_limit(o, field, resources[resource], kind),
        read_ids(o.get("after_ok", []), f"{field}.after_ok"),
        read_ids(o.get("after_any", []), f"{field}.after_any"),
        checkpoint_us=every,
    )
    return array_tasks(one, o, field, submitted)


def _time_limit(o: dict, field: str, resource, kind: str) -> int | None:
    """The task's time limit in microseconds, as the live rule (`apps/tasks/services/time_limits`):
    asked for, at most the compute resource's maximum; else its default (at most the maximum);
    else the maximum; else none. A session has none."""
    asked = o.get("time_limit_s")
    most = resource.max_time_limit_s
    if kind == "session":
        if asked is not None:
            raise ScenarioError(f"{field}.time_limit_s: a session has no time limit: its idle limits end it")
        return None
    if asked is None:
        default = resource.default_time_limit_s
        limit = most if default is None else default if most is None else min(default, most)
    else:
        limit = read_time_limit(asked, f"{field}.time_limit_s")
        if most is not None and limit > most:
            raise ScenarioError(
                f"{field}.time_limit_s: {limit} s is above the maximum of {most} s on compute resource "
                f"{resource.name!r}"
            )
    return None if limit is None else limit * US_PER_S


def _priority(v, field: str) -> int:
    """A whole number, negative allowed (1.0 read as a decimal is whole; true is not a number)."""
    if isinstance(v, bool) or not isinstance(v, int | Decimal) or not Decimal(v).is_finite() or v != int(v):
        raise ScenarioError(f"{field}: must be a whole number (negative allowed)")
    if abs(v) > PRIORITY_MAX:
        raise ScenarioError(f"{field}: must be between -{PRIORITY_MAX} and {PRIORITY_MAX}")
    return int(v)


def _activity(v, field: str) -> tuple[tuple[int, bool], ...]:
    """`[[at_s, busy], ...]`, at_s from the session's start and increasing."""
    entries = []
    for i, e in enumerate(read_list(v, field)):
        if not isinstance(e, list) or len(e) != 2:
            raise ScenarioError(f"{field}[{i}]: must be a pair [at_s, busy]")
        at = read_us(e[0], f"{field}[{i}][0]")
        if entries and at <= entries[-1][0]:
            raise ScenarioError(f"{field}[{i}][0]: must be later than the entry before")
        entries.append((at, read_bool(e[1], f"{field}[{i}][1]")))
    return tuple(entries)
