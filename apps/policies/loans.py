"""Dated quota loans (issue 35, rule 4): a group lends GPUs of reservation or limit, or budget
hours of one time budget window, to another group until a date.

``lend`` applies it at once: the lender's quota goes down, then the borrower's up, each through
``services.update_policy`` (or ``set_budget_windows``) under the locks of ``lock_policies``, so
every rule of ``apps.policies.rules`` holds or nothing is saved. It is also refused when giving it
back at its date would break a rule on the state as it stands (checked by applying the give-back
in a savepoint and rolling it back). Both policies' changes are audited (``PolicyChange``, via
``loan``) with the ``QuotaLoan`` row, in one transaction.

``end_due`` gives back every loan whose date has passed: the engine calls it before each pass
(also while it is disabled, and on its first pass after downtime), so a loan never outlives its
date by more than one pass interval of a running engine. A give-back that a rule refuses (someone
changed a policy since) keeps the loan active with the reason (``revert_error``), shown on both
groups' pages and in the admin, and is tried again at each pass. ``give_back`` ends one early.

Who lends at once: whoever may split the quota of the groups' nearest common group
(``split.may_split_quota``: its department heads, leadership for business units, IT). Anyone
else asks through a change request of kind ``loan`` (``apps.governance``).
"""

from datetime import datetime
from decimal import Decimal, InvalidOperation

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Group, User
from apps.core.gpus import gpu_amount_error
from apps.policies import services
from apps.policies.models import PolicyChange, QuotaLoan, ResourcePolicy
from apps.policies.split import may_split_quota

What = QuotaLoan.What


class _Undo(Exception):
    """Rolls back the savepoint of the give-back check."""


def common_group(a: Group, b: Group) -> Group | None:
    """The nearest group that is ``a`` or above it and ``b`` or above it."""
    above_b = {g.pk for g in [b, *b.ancestors()]}
    return next((g for g in [a, *a.ancestors()] if g.pk in above_b), None)


def may_lend(user: User, lender: ResourcePolicy, borrower: ResourcePolicy) -> bool:
    owner = common_group(lender.group, borrower.group)
    return owner is not None and user.is_authenticated and may_split_quota(user, owner)


def clean_loan(lender, borrower, *, what: str, amount, until, period: str = "", now: datetime) -> dict:
    """The loan's values checked for shape (each error names its field): a known quantity, a
    positive amount (a GPU amount, or budget hours to the thousandth), a date ahead, two groups."""
    if what not in What.values:
        raise ValidationError({"what": f"Lend one of {', '.join(What.values)}."})
    try:
        amount = Decimal(str(amount))
    except (InvalidOperation, ValueError) as error:
        raise ValidationError({"amount": "Enter a number."}) from error
    if not amount.is_finite() or amount <= 0:
        raise ValidationError({"amount": "Lend more than 0."})
    if what == What.BUDGET_HOURS:
        if amount != amount.quantize(Decimal("0.001")):
            raise ValidationError({"amount": "Budget hours have at most 3 decimals."})
        period = period or lender.budget_period
        if period not in ResourcePolicy.Period.values:
            raise ValidationError({"period": "Choose the budget window lent from: day, week or month."})
    else:
        if gpu_amount_error(amount):
            raise ValidationError({"amount": gpu_amount_error(amount)})
        period = ""
    if not isinstance(until, datetime) or timezone.is_naive(until):
        raise ValidationError({"until": "Give a date and time with its time zone."})
    if until <= now:
        raise ValidationError({"until": "The loan must end in the future."})
    if lender.pk == borrower.pk:
        raise ValidationError({"borrower": "A group cannot lend to itself."})
    return {"what": what, "amount": amount, "period": period, "until": until}


def _shift(policy: ResourcePolicy, what: str, period: str, delta: Decimal) -> None:
    """Move the policy's quantity by ``delta``, checked by every rule (``ValidationError``)."""
    if what != What.BUDGET_HOURS:
        services.update_policy(policy, **{what: getattr(policy, what) + delta})
        return
    if policy.budget_hours is not None and policy.budget_period == period:
        services.update_policy(policy, budget_hours=policy.budget_hours + delta)
        return
    windows = services.extra_budgets_of(policy)
    if period not in windows:
        raise ValidationError({"period": f"{policy.group} has no time budget per {period}."})
    windows[period] += delta
    services.set_budget_windows(policy, windows)
    policy.refresh_from_db()


def _move(source, target, what: str, period: str, amount: Decimal, when: str) -> None:
    """``amount`` from ``source`` to ``target``: the decrease first, so that a move between two
    groups under one parent never passes through a sum above the parent's."""
    for policy, delta in ((source, -amount), (target, amount)):
        try:
            _shift(policy, what, period, delta)
        except ValidationError as error:
            reasons = [m for messages in error.message_dict.values() for m in messages]
            raise ValidationError({"amount": [f"{when}: {policy.group}: {m}" for m in reasons]}) from error


def _check_ends(new: QuotaLoan) -> None:
    """Give back every active loan and ``new`` in the order of their dates, each checked by every
    rule, then roll all of it back: a loan is refused when its own end, or the end of a loan
    before it, would then break a rule (the other loans' ends keep their order)."""
    active = list(
        QuotaLoan.objects.filter(state=QuotaLoan.State.ACTIVE).select_related(
            "lender__group", "borrower__group"
        )
    )
    ids = {pk for loan in [*active, new] for pk in (loan.lender_id, loan.borrower_id)}
    policies = {p.pk: p for p in ResourcePolicy.objects.select_related("group").filter(pk__in=ids)}
    try:
        with transaction.atomic():
            for loan in sorted(
                [*active, new], key=lambda loan: (loan.ends_at, loan.pk is None, loan.pk or 0)
            ):
                source, target = policies[loan.borrower_id], policies[loan.lender_id]
                which = "it" if loan is new else f"the loan of {loan}"
                when = f"When {which} ends ({loan.ends_at:%Y-%m-%d %H:%M} UTC)"
                _move(source, target, loan.what, loan.period, loan.amount, when)
            raise _Undo
    except _Undo:
        pass


def _locked(*policies: ResourcePolicy) -> list[ResourcePolicy]:
    locked = services.lock_policies(policies)
    return [locked[p.pk] for p in policies]


def _audit(policies, before: dict, *, actor, at) -> None:
    for policy in policies:
        policy.refresh_from_db()
        services.record_quota_change(policy, before[policy.pk], actor=actor, via=PolicyChange.Via.LOAN, at=at)


def lend(
    lender: ResourcePolicy,
    borrower: ResourcePolicy,
    *,
    what: str,
    amount,
    until: datetime,
    period: str = "",
    note: str = "",
    actor: User | None = None,
    via: str = QuotaLoan.Via.PORTAL,
    check_permission: bool = True,
    now: datetime | None = None,
) -> QuotaLoan:
    """Lend now until ``until``. Refused with ``PermissionDenied`` when ``actor`` may not (ask
    through a change request), with ``ValidationError`` (field ``amount``, the side and the rule;
    or the field of a bad value) when either side would break a rule now or at the end."""
    now = now or timezone.now()
    if check_permission and (actor is None or not may_lend(actor, lender, borrower)):
        raise PermissionDenied(
            f"You may not lend between {lender.group} and {borrower.group}; ask through a change request."
        )
    values = clean_loan(lender, borrower, what=what, amount=amount, until=until, period=period, now=now)
    what, amount, period = values["what"], values["amount"], values["period"]
    with transaction.atomic():
        lender, borrower = _locked(lender, borrower)
        before = {p.pk: services.quota_of(p) for p in (lender, borrower)}
        _move(lender, borrower, what, period, amount, "At the start")
        _check_ends(
            QuotaLoan(
                lender=lender, borrower=borrower, what=what, amount=amount, period=period, ends_at=until
            )
        )
        _audit((lender, borrower), before, actor=actor, at=now)
        return QuotaLoan.objects.create(
            lender=lender,
            borrower=borrower,
            what=what,
            amount=amount,
            period=period,
            starts_at=now,
            ends_at=until,
            note=(note or "").strip()[:200],
            via=via,
            created_by=actor,
        )


def give_back(loan: QuotaLoan, *, actor: User | None = None, now: datetime | None = None) -> QuotaLoan:
    """End an active loan now: the quantity goes back to the lender. ``ValidationError`` when a
    rule refuses it (the loan stays active, with the reason in ``revert_error``)."""
    now = now or timezone.now()
    refused = None
    with transaction.atomic():
        loan = QuotaLoan.objects.select_for_update(no_key=True).filter(pk=loan.pk).first()
        if loan is None or loan.state != QuotaLoan.State.ACTIVE:
            raise ValidationError({"state": "This loan has ended already."})
        lender, borrower = _locked(loan.lender, loan.borrower)
        before = {p.pk: services.quota_of(p) for p in (lender, borrower)}
        try:
            with transaction.atomic():
                _move(borrower, lender, loan.what, loan.period, loan.amount, "Giving it back")
        except ValidationError as error:
            refused = error
            loan.revert_error = " ".join(error.messages)
            loan.save(update_fields=["revert_error"])
        else:
            _audit((lender, borrower), before, actor=actor, at=now)
            loan.state, loan.ended_at, loan.ended_by, loan.revert_error = (
                QuotaLoan.State.ENDED,
                now,
                actor,
                "",
            )
            loan.save(update_fields=["state", "ended_at", "ended_by", "revert_error"])
    if refused is not None:
        raise refused
    return loan


def end_due(now: datetime | None = None) -> list[QuotaLoan]:
    """Give back every active loan whose date has passed (each in its own transaction); returns
    those given back. One indexed query when none is due."""
    now = now or timezone.now()
    due = QuotaLoan.objects.filter(state=QuotaLoan.State.ACTIVE, ends_at__lte=now).order_by("ends_at", "pk")
    ended = []
    for loan in due.select_related("lender__group", "borrower__group"):
        try:
            ended.append(give_back(loan, now=now))
        except ValidationError:
            continue  # kept active with its reason; tried again at the next pass
    return ended
