"""The measured guarantee of reservations on the portal and the API: the figures of
``apps.tasks.guarantee_selectors`` in words (``klique/numbers.py``) over a UTC calendar period."""

from datetime import datetime

from apps.accounts.selectors import subtrees
from apps.engine.core.budget import period_bounds
from apps.engine.verdict_words import RULE_WORDS
from apps.policies.models import ResourcePolicy
from apps.tasks import guarantees
from apps.tasks.guarantee_selectors import guarantees_of
from klique import numbers

PERIODS = ("day", "week", "month")
CAUSE_WORDS = {
    guarantees.START: "placed in time, started late (its worker or a cloud node's boot)",
    guarantees.UNKNOWN: "unknown",
}


def bounds(period: str, now: datetime) -> tuple[datetime, datetime]:
    """The current UTC day, week or month; ``YYYY-MM`` names a month. ValueError otherwise."""
    if period in PERIODS:
        return period_bounds(now, period)
    month = datetime.strptime(period, "%Y-%m").replace(tzinfo=now.tzinfo)
    return period_bounds(month, "month")


def cause_words(cause: str) -> str:
    return CAUSE_WORDS.get(cause) or RULE_WORDS.get(cause, (cause,))[0]


def shown(name: str, figures: guarantees.Guarantee) -> dict:
    """One row of the portal's table."""
    return {
        "name": name,
        "within": numbers.duration(figures.start_s),
        "runs": numbers.count(figures.count),
        "share": numbers.percent(figures.share),
        "p50": numbers.duration(figures.p50_s),
        "p95": numbers.duration(figures.p95_s),
        "misses": [
            {
                "task": miss.task,
                "wait": numbers.duration(miss.wait_s),
                "cause": cause_words(miss.cause),
                "waiting": miss.waiting,
            }
            for miss in figures.misses
        ],
    }


def by_unit(units, start: datetime, end: datetime) -> list[dict]:
    """One row per business unit: the figures of every policy in its subtree taken together
    (``guarantees.combine``), read in one ``guarantees_of`` for all units."""
    units = list(units)
    groups = subtrees(unit.pk for unit in units)
    policies = list(ResourcePolicy.objects.filter(group_id__in=set().union(*groups.values())))
    measured = guarantees_of(policies, start, end)
    rows = []
    for unit in units:
        mine = [measured[p.pk] for p in policies if p.group_id in groups[unit.pk]]
        rows.append(shown(unit.name, guarantees.combine(mine)))
    return rows
