"""Money budget windows of a policy: checked and written as one set ({period: (amount, currency)}),
under the quota write's locks, audited as a ``PolicyChange`` of ``money_budgets`` (before and after as text).

A money window counts the spend of the policy's subtree at the effective prices in its currency
(``apps.ledger.budgets_money``); each window is enforced on its own, a parent's over its subtree, so
no sum rule ties a child's money window to its parent's.
"""

from collections import defaultdict
from collections.abc import Mapping
from decimal import Decimal

from django.db import transaction

from apps.core.audit import record_change
from apps.core.currency import currency_error
from apps.core.numbers import NotPlain, plain_decimal
from apps.policies import rules, selectors, services
from apps.policies.models import BudgetWindow, PolicyChange, ResourcePolicy

FIELD = "money_budgets"
DIGITS, PLACES = BudgetWindow.MONEY_DIGITS, BudgetWindow.MONEY_PLACES
Windows = Mapping[str, tuple[Decimal, str]]


def money_budgets_of(policy: ResourcePolicy) -> dict[str, tuple[Decimal, str]]:
    """{period: (amount, currency)} as stored, shortest period first (none for an unsaved policy)."""
    return selectors.money_windows([policy]).get(policy.pk, {})


def windows_text(windows: Windows) -> str:
    """The audit text: "month 500.0000 EUR" (empty without any)."""
    ordered = sorted(windows.items(), key=lambda item: selectors.PERIOD_ORDER.get(item[0], 9))
    return "; ".join(f"{period} {Decimal(amount):.4f} {code.upper()}" for period, (amount, code) in ordered)


def amount_error(amount) -> str | None:
    try:
        value = plain_decimal(amount)
    except NotPlain as error:
        return str(error)
    if not value.is_finite() or value < 0:
        return "The amount must be 0 or more."
    if value >= Decimal(10) ** (DIGITS - PLACES):
        return f"Less than {Decimal(10) ** (DIGITS - PLACES):f}."
    if value != value.quantize(Decimal(1).scaleb(-PLACES)):
        return f"At most {PLACES} decimal places."
    return None


def money_window_errors(windows: Mapping) -> rules.Errors:
    """Field -> reasons for money windows {period: (amount, currency)}: a known period, an amount of
    0 or more with at most four decimal places, and an ISO 4217 currency (errors under
    ``money_budgets``, each naming the period)."""
    errors: rules.Errors = defaultdict(list)
    periods = dict(ResourcePolicy.Period.choices)
    for period, value in windows.items():
        if period not in periods:
            errors[FIELD].append(f"Budget period {period!r} must be one of {', '.join(periods)}.")
            continue
        if not isinstance(value, list | tuple) or len(value) != 2:
            errors[FIELD].append(f"The money budget per {period} needs an amount and a currency.")
            continue
        amount, currency = value
        if problem := amount_error(amount):
            errors[FIELD].append(f"The money budget per {period}: {problem}")
        if problem := currency_error(currency):
            errors[FIELD].append(f"The money budget per {period}: {problem}")
    return errors


def cleaned(windows: Mapping) -> dict[str, tuple[Decimal, str]]:
    """Checked windows as stored: Decimal amounts, currencies in capitals (``ValidationError``)."""
    rules.raise_if(money_window_errors(windows))
    return {period: (plain_decimal(amount), code.upper()) for period, (amount, code) in windows.items()}


def write_money_windows(policy: ResourcePolicy, windows: Windows) -> None:
    """Store exactly ``windows`` as the policy's money windows (checked by the caller)."""
    stored = BudgetWindow.objects.filter(policy_id=policy.pk, amount__isnull=False)
    stored.exclude(period__in=list(windows)).delete()
    for period, (amount, currency) in windows.items():
        BudgetWindow.objects.update_or_create(
            policy_id=policy.pk,
            period=period,
            amount__isnull=False,
            defaults={"amount": amount, "currency": currency},
        )


def set_money_windows(
    policy: ResourcePolicy, windows: Mapping, *, version: int | None = None, actor=None, via: str = ""
) -> ResourcePolicy:
    """Replace the money windows of a policy with ``windows`` ({period: (amount, currency)}):
    checked (``ValidationError`` under ``money_budgets``), under the locks of
    ``services.lock_policies``; a change raises the policy's version and, with ``via``, is
    audited. ``version``: the version a form showed (``QuotaChanged`` when saved since)."""
    windows = cleaned(windows)
    with transaction.atomic():
        seen = None if version is None else {policy.pk: version}
        current = services.lock_policies([policy], versions=seen)[policy.pk]
        before, after = windows_text(money_budgets_of(current)), windows_text(windows)
        if after == before:
            return policy
        write_money_windows(current, windows)
        current.version += 1
        ResourcePolicy.objects.filter(pk=current.pk).update(version=current.version)
        if via:
            record_change(
                PolicyChange, actor=actor, via=via, policy=current, changes={FIELD: [before, after]}
            )
    policy.version = current.version
    return policy
