"""The measured guarantee of reservations on the portal and the API: the figures of
``apps.tasks.guarantee_selectors`` in words (``klique/numbers.py``) over a UTC calendar period."""

from datetime import datetime

from apps.engine.core.budget import period_bounds
from apps.engine.verdict_words import RULE_WORDS
from apps.tasks import guarantees
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
            {"task": miss.task, "wait": numbers.duration(miss.wait_s), "cause": cause_words(miss.cause)}
            for miss in figures.misses
        ],
    }
