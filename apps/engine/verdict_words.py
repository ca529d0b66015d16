"""The words of the engine's decisions: the verdict stored on a waiting task (``verdict_json``),
each verdict rule in a few words and a sentence (``RULE_WORDS``, which the portal shows), and why
work was stopped (``REASON_WORDS``). The one owner of this wording; ``apps.engine.apply`` writes it.
"""

from decimal import Decimal

from apps.engine import core
from apps.engine.loader import Loaded
from klique import numbers

REASON_WORDS = {
    "reclaim": "its GPUs were reclaimed for another group's reservation",
    "budget": "its group's budget is used up",
    "priority": "a higher-priority task of its own group needed its GPUs",
    "fair_share": (
        "its group held more than its fair share of borrowed GPUs and a group beside it, below its own, "
        "needed them"
    ),
    "time_limit": "it reached its time limit",
    "maintenance": "a maintenance window began on its pool",
}


WAITING_FOR_ROOM = {"no_capacity", "behind_higher_priority"}


def verdict_json(verdict: core.Verdict, loaded: Loaded) -> dict:
    """The verdict as stored on the task (without its place in line, which is read live).

    ``key`` identifies the verdict whole, so the applier compares short strings, not documents.
    """
    pools = [loaded.pool_names.get(p, p) for p in verdict.pools]
    group = loaded.group_names.get(verdict.policy, verdict.policy) if verdict.policy else None
    data: dict = {"rule": verdict.rule}
    if pools:
        data["pools"] = pools
    if group:
        data["group"] = group
    if verdict.rule == "no_capacity":
        message = (
            f"No room for its size in its pools ({', '.join(pools)}): their declared capacity is in use."
        )
    elif verdict.rule == "policy_limit":
        message = f"{group} is at its limit: this task would take it above the most GPUs it may hold at once."
    elif verdict.rule == "ancestor_limit":
        message = f"{group}, above this group, is at its limit."
    elif verdict.rule in ("budget_start_check", "budget_used_up") and is_money_window(verdict.cause):
        message = _money_verdict(verdict, group, data)
    elif verdict.rule == "budget_start_check":
        # Tenths of an hour: the figures move as the group's work burns budget, and finer ones
        # would rewrite the verdict of every waiting task of the group every few seconds.
        data["hours_left"] = round(verdict.hours_left, 1)
        data["hours_needed"] = round(verdict.hours_needed, 1)
        data["window"] = verdict.cause
        message = (
            f"The {window_adjective(verdict.cause)}time budget of {group} has {data['hours_left']} h left; "
            f"starting needs {data['hours_needed']} h (the low watermark at the group's rate with this task)."
        )
    elif verdict.rule == "cloud_cap_reached":
        data["reset_at"] = verdict.reset_at.isoformat()
        message = (
            f"Cloud spend cap reached for {group}: no new work goes to {', '.join(pools)} until it resets "
            f"at {verdict.reset_at:%Y-%m-%d %H:%M} UTC."
        )
    elif verdict.rule == "budget_used_up":
        data["reset_at"] = verdict.reset_at.isoformat()
        data["window"] = verdict.cause
        message = (
            f"The {window_adjective(verdict.cause)}time budget of {group} is used up; it resets at "
            f"{verdict.reset_at:%Y-%m-%d %H:%M} UTC."
        )
    elif verdict.rule == "reclaim_held":
        data["reset_at"] = verdict.reset_at.isoformat()
        data["cause"] = verdict.cause
        protected = (
            "minimum runtime"
            if verdict.cause == "min_runtime"
            else "their group's cap on preemptions per hour"
        )
        message = (
            f"Reclaim waits: the work it would take back in {', '.join(pools)} is protected by "
            f"{protected} until {verdict.reset_at:%H:%M} UTC."
        )
    elif verdict.rule == "fair_share":
        data["borrowed"] = numbers.gpus(Decimal(verdict.borrowed) / 1000)
        data["share"] = numbers.gpus(Decimal(verdict.share) / 1000)
        message = (
            f"{group} holds {data['borrowed']} of its fair {data['share']} borrowed GPUs: idle GPUs go "
            f"to the groups beside it that hold less than their fair share."
        )
    elif verdict.rule == "starving":
        data["needed"], data["free"] = _gpus(verdict.needed), _gpus(verdict.free)
        message = (
            f"Waited past its profile's starvation guard: {pools[0]} holds new starts for it. "
            f"Expected start: when {data['needed']} GPUs are free on {pools[0]} ({data['free']} free now)."
        )
    elif verdict.rule == "starvation_hold":
        data["cause"] = verdict.cause
        message = (
            f"{pools[0]} holds new starts for an older task (task {verdict.cause}) that has waited past "
            "its profile's starvation guard; other work starts there once it has started."
        )
    elif verdict.rule == "dependency":
        data["waits_for"] = [_task_id(task) for task in verdict.waits_for]
        message = dependency_message(data["waits_for"])
    elif verdict.rule == "array_limit":
        data["array"], data["max_running"] = _task_id(verdict.cause), verdict.max_running
        message = (
            f"Array {data['array']} has its {verdict.max_running} of {verdict.max_running} tasks running "
            "at once (max_running): the next of its tasks starts when one of them ends."
        )
    elif verdict.rule == "maintenance":
        data["since"], data["reset_at"], data["cause"] = (
            verdict.since.isoformat(),
            verdict.reset_at.isoformat(),
            verdict.cause,
        )
        message = maintenance_message(pools[0], verdict.since, verdict.reset_at, verdict.cause)
    elif verdict.rule == "never_fits":
        data["cause"] = verdict.cause
        if verdict.cause == "no_pool":
            message = "Never fits now: no pool of its profile is enabled. IT must enable or add a pool."
        else:
            message = (
                f"Never fits now: it is larger than the largest enabled pool of its profile "
                f"({', '.join(pools)}). IT must raise a pool's capacity or add a larger pool."
            )
    else:
        message = f"Room in {', '.join(pools)} goes to higher-priority work first."
    data["message"] = message
    rule_class = "room" if verdict.rule in WAITING_FOR_ROOM else verdict.rule
    data["key"] = "|".join(
        str(part)
        for part in (
            rule_class,
            "" if rule_class == "room" else ",".join(pools),
            group or "",
            data.get("hours_left", ""),
            data.get("hours_needed", ""),
            data.get("reset_at", ""),
            data.get("window", data.get("cause", "")),
        )
    )
    if "money_left" in data:
        data["key"] += f"|{data['money_left']}|{data.get('money_needed', '')}"
    if "share" in data:
        data["key"] += f"|{data['borrowed']}|{data['share']}"
    if "waits_for" in data:
        data["key"] = dependency_key(verdict.waits_for)
    if "array" in data:
        data["key"] += f"|{data['array']}|{data['max_running']}"
    if "since" in data:
        data["key"] += f"|{data['since']}"
    return data


def maintenance_message(pool: str, since, until, cause: str | None) -> str:
    """ "Pool onprem-k8s in maintenance from ... to ...", and why that holds this task."""
    window = f"Pool {pool} in maintenance from {since:%Y-%m-%d %H:%M} to {until:%Y-%m-%d %H:%M} UTC"
    if cause == "window_ahead":
        return (
            f"{window}: its time limit would run past the start (or it has none), so it waits for "
            "another pool or the end of the window."
        )
    return f"{window}: it starts when the window ends or another pool has room."


def _task_id(task: str | None):
    """A task's (or array's) id as the database gives it: an integer."""
    return int(task) if task and task.isdigit() else task


def dependency_key(waits_for) -> str:
    """The key of a held task's verdict (``verdict_json``'s), without building the verdict: the
    applier compares it with the stored one for every held task at every pass."""
    return "dependency|||||||" + ",".join(str(_task_id(task)) for task in waits_for)


NAMED_AT_MOST = 5  # the dependencies a verdict names; the others are counted


def dependency_message(waits_for: list) -> str:
    """ "Waits for task 12 and task 15 to end": the tasks a held task runs after that have not ended."""
    if not waits_for:
        return "Waits for the tasks it runs after to end."
    named = [f"task {task}" for task in waits_for[:NAMED_AT_MOST]]
    more = len(waits_for) - len(named)
    if more:
        listed = f"{', '.join(named)} and {more} more"
    elif len(named) > 1:
        listed = f"{', '.join(named[:-1])} and {named[-1]}"
    else:
        listed = named[0]
    them = "it" if len(waits_for) == 1 else "them"
    return f"Waits for {listed} to end: it runs after {them}."


# Each verdict rule in a few words (a table cell) and in a sentence (its hover text); the
# messages above say the same at length, with the task's figures.
RULE_WORDS = {
    "budget_used_up": (
        "budget used up",
        "A time or money budget of its policy or one above it is used up until the reset.",
    ),
    "policy_limit": ("at its limit", "Its group holds the most GPUs its resource policy allows at once."),
    "ancestor_limit": (
        "a group above at its limit",
        "A group above its own holds the most GPUs its policy allows.",
    ),
    "budget_start_check": (
        "too little budget left to start",
        "The budget left (hours or money) would not last the low watermark at the rate with this task.",
    ),
    "behind_higher_priority": (
        "behind higher-priority work",
        "Room in its pools goes to higher-priority work first.",
    ),
    "cloud_cap_reached": (
        "cloud spend cap reached",
        "A cloud spend cap keeps new work off the cloud pools until it resets.",
    ),
    "reclaim_held": (
        "reclaim held",
        "Taking its reservation back waits: the work it would stop is protected for now.",
    ),
    "fair_share": (
        "at its fair share",
        "Its group already borrows its fair share; idle GPUs go to groups beside it below theirs.",
    ),
    "starving": (
        "holds a pool (starvation guard)",
        "It waited past its profile's starvation guard: a pool holds new starts until enough GPUs are "
        "free for it.",
    ),
    "starvation_hold": (
        "pool held for an older task",
        "A pool of its profile holds new starts for an older task that waited past the starvation guard.",
    ),
    "no_capacity": ("no room in its pools", "Every pool of its profile has its declared capacity in use."),
    "never_fits": ("never fits", "It is larger than every enabled pool of its profile, or none is enabled."),
    "agent_cap": ("its agent at its cap", "Its agent holds the most GPUs at once its caps allow."),
    "dependency": (
        "waits for its dependencies",
        "It runs after other tasks (after_ok, after_any), and some of them have not ended yet.",
    ),
    "maintenance": (
        "pool in maintenance",
        "A pool of its profile is in maintenance, or will be before its time limit ends.",
    ),
    "array_limit": (
        "its array at max_running",
        "Its array already has as many tasks placed or running at once as its max_running allows.",
    ),
}


def _gpus(milli: int | None) -> str:
    """Milli-GPUs as GPUs for a message: 4000 -> "4", 500 -> "0.5"."""
    return f"{(milli or 0) / 1000:g}"


def is_money_window(window: str | None) -> bool:
    """Whether a window's label names a money window ("month 500.00 EUR"; a time window's is its
    period)."""
    return bool(window) and " " in window


def money_window_words(window: str) -> str:
    """A money window's label in words: "month 500.00 EUR" -> "€500.00 a month"."""
    period, amount, currency = window.split(" ")
    return f"{numbers.money(Decimal(amount), currency)} a {period}"


def budget_used_up_words(window: str | None) -> str:
    """Why a budget stop stopped work, naming the window: "its group's daily time budget is used
    up", "its group's €500.00 a month is used up"."""
    if is_money_window(window):
        return f"its group's {money_window_words(window)} is used up"
    return f"its group's {window_adjective(window)}time budget is used up"


def _money_verdict(verdict: core.Verdict, group: str | None, data: dict) -> str:
    """A money window's budget_used_up or budget_start_check. Money to the ten cents: finer figures
    would rewrite the verdict of every waiting task of the group at each pass."""
    data["window"] = verdict.cause
    currency = verdict.cause.rsplit(" ", 1)[1]
    left = core.units_to_money(max(verdict.budget_left, 0)).quantize(Decimal("0.1"))
    data["money_left"], data["currency"] = str(left), currency
    words = money_window_words(verdict.cause)
    if verdict.rule == "budget_used_up":
        data["reset_at"] = verdict.reset_at.isoformat()
        return f"The {words} of {group} is used up; it resets at {verdict.reset_at:%Y-%m-%d %H:%M} UTC."
    needed = core.units_to_money(verdict.budget_needed).quantize(Decimal("0.1"))
    data["money_needed"] = str(needed)
    return (
        f"The {words} of {group} has {numbers.money(left, currency)} left; starting needs "
        f"{numbers.money(needed, currency)} (the low watermark at the group's spend rate with this task "
        "on its pool)."
    )


def window_adjective(period: str | None) -> str:
    """The window's adjective with its space ("daily "), or nothing for an unnamed window."""
    return {"day": "daily ", "week": "weekly ", "month": "monthly "}.get(period or "", "")
