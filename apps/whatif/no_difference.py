"""A done run's "no difference" in words (docs/whatif.md, "No difference"): for each group the change
left as it was, which rule held it on the changed side (``held``'s figures in the report's
``no_difference``), worded with the verdicts' own words (``RULE_WORDS``) and the portal's numbers.
The run page and the API say the same sentences."""

from __future__ import annotations

from apps.engine.verdict_words import RULE_WORDS, window_adjective
from apps.whatif.held import BUDGET_RULES, LIMIT_RULES
from klique import numbers

FOREIGN = ("another rule", "A rule the portal has no words for held its tasks.")


def sentences(report: dict | None, names: dict[str, str]) -> list[dict]:
    """One entry per group without a difference: its slug, name, rule (None when it did not
    wait or had no task) and the sentence saying why. ``names``: the groups' names by slug."""
    found = (report or {}).get("no_difference") or {}
    return [
        {
            "group": slug,
            "name": names.get(slug, slug),
            "rule": held.get("rule"),
            "why": sentence(names.get(slug, slug), held, names),
        }
        for slug, held in found.items()
    ]


def sentence(name: str, held: dict, names: dict[str, str]) -> str:
    if not held.get("tasks"):
        return f"{name}: no difference. It had no task in the period."
    rule = held.get("rule")
    if rule is None:
        return (
            f"{name}: no difference. Its tasks did not wait on the changed side, so the change had "
            "nothing to start sooner."
        )
    short, why = RULE_WORDS.get(rule, FOREIGN)
    share = numbers.percent(held.get("share") or 0)
    return (
        f"{name}: no difference. Its tasks still waited on the changed side, held by “{short}” for "
        f"{share} of their waiting time: {why[:1].lower()}{why[1:].rstrip('.')}{_figure(rule, held, names)}. "
        "So the change started none of them sooner."
    )


def _figure(rule: str, held: dict, names: dict[str, str]) -> str:
    """The budget or limit that held it: " (the daily budget of Language: 2,000 hours)"."""
    policy = held.get("policy")
    if not policy:
        return ""
    whose = names.get(policy, policy)
    if rule in BUDGET_RULES and held.get("hours") is not None:
        hours = numbers.plural(held["hours"], "hour", figure=numbers.hours)
        return f" (the {window_adjective(held.get('window'))}budget of {whose}: {hours})"
    if rule in LIMIT_RULES and held.get("gpus") is not None:
        return f" (the limit of {whose}: {numbers.plural(held['gpus'], 'GPU', figure=numbers.gpus)})"
    return ""
