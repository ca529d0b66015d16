"""The live engine: the engine switch, the pass, the budget meter.

The pass loads a snapshot of the database, asks the pure core (``apps.engine.core``) for
decisions, and applies them in one transaction; see ``docs/engine.md``.
"""

import logging
import os
import socket
import time
from contextlib import contextmanager
from datetime import timedelta

from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, connection, models, transaction
from django.db.models import F
from django.utils import timezone

from apps.core import events
from apps.engine import core, held
from apps.engine.apply import apply
from apps.engine.loader import load
from apps.engine.lock import exclusive_pass
from apps.engine.models import PASS_BUCKETS_MS, DisabledWindow, EngineSwitch, PassRecord, PassTotals
from apps.policies import loans
from apps.tasks import wake
from klique import numbers

log = logging.getLogger("klique.engine")
pass_log = logging.getLogger("klique.engine.pass")


def switch() -> EngineSwitch:
    return EngineSwitch.objects.get_or_create(pk=1)[0]


def engine_enabled() -> bool:
    return EngineSwitch.objects.filter(pk=1, enabled=False).first() is None


@transaction.atomic
def set_engine_enabled(enabled: bool, *, actor=None, at=None) -> EngineSwitch:
    """Disable or enable the engine. A disabled window is recorded and not charged to budgets."""
    at = at or timezone.now()
    state = EngineSwitch.objects.select_for_update(no_key=True).get_or_create(pk=1)[0]
    if state.enabled == enabled:
        return state
    state.enabled, state.changed_at, state.changed_by = enabled, at, actor
    state.save()
    if enabled:
        DisabledWindow.objects.filter(end__isnull=True).update(end=at)
    else:
        DisabledWindow.objects.create(start=at, disabled_by=actor)
    return state


def _alert_recipients(policy):
    from apps.accounts.models import Membership, User

    return list(
        User.objects.filter(is_active=True)
        .filter(
            models.Q(memberships__group=policy.group) | models.Q(memberships__role=Membership.Role.IT_ADMIN)
        )
        .distinct()
    )


def _send_alert(policy, status, kind: str, at) -> bool:
    """Warn once of a time window (one of a policy's ``BudgetStatus.windows``) crossing its alert
    threshold or used up (``_record_alert``)."""
    from apps.accounts.models import Notification
    from apps.ledger.models import BudgetAlert

    window = status.window_name
    used, budget = numbers.hours(status.used_hours), numbers.hours(status.budget_hours)
    if kind == BudgetAlert.Kind.USED_UP:
        subject = f"The {window} time budget of {policy.group} used up"
        message = (
            f"{policy.group} has used {used} of its {budget} budget hours this "
            f"{status.period} ({window} time budget). New budgeted work waits and running budgeted work "
            f"is requeued until {status.resets_at:%Y-%m-%d %H:%M} UTC or until the budget is raised."
        )
        notification_kind = Notification.Kind.BUDGET_USED_UP
    else:
        subject = f"The {window} time budget of {policy.group} at {numbers.percent(status.used_fraction)}"
        message = (
            f"{policy.group} has used {used} of its {budget} budget hours this "
            f"{status.period} ({window} time budget, alert threshold {policy.alert_threshold}%); "
            f"{status.run_out_text()}."
        )
        notification_kind = Notification.Kind.BUDGET_ALERT
    alert = BudgetAlert(
        policy=policy,
        period=status.period,
        period_start=status.period_start,
        kind=kind,
        used_hours=status.used_hours,
        budget_hours=status.budget_hours,
        sent_at=at,
    )
    return _record_alert(alert, notification_kind, subject, message)


def _send_money_alert(policy, status, kind: str, at) -> bool:
    """Warn once of a money window (``apps.ledger.budgets.MoneyStatus``) crossing its alert
    threshold or used up (``_record_alert``)."""
    from apps.accounts.models import Notification
    from apps.ledger.models import BudgetAlert

    amount = numbers.money(status.amount, status.currency)
    spent = numbers.money(status.spent, status.currency)
    if kind == BudgetAlert.Kind.USED_UP:
        subject = f"The {status.window_name} money budget of {policy.group} used up"
        message = (
            f"{policy.group} has spent {spent} of its {amount} this {status.period}. New work on priced "
            f"pools waits and running work there is requeued until {status.resets_at:%Y-%m-%d %H:%M} UTC "
            "or until the budget is raised."
        )
        notification_kind = Notification.Kind.BUDGET_USED_UP
    else:
        share = numbers.percent(status.used_fraction)
        subject = f"The {status.window_name} money budget of {policy.group} at {share}"
        message = (
            f"{policy.group} has spent {spent} of its {amount} this {status.period} "
            f"(alert threshold {policy.alert_threshold}%); {status.run_out_text()}."
        )
        notification_kind = Notification.Kind.BUDGET_ALERT
    alert = BudgetAlert(
        policy=policy,
        period=status.period,
        currency=status.currency,
        period_start=status.period_start,
        kind=kind,
        spent=status.spent,
        amount=status.amount,
        sent_at=at,
    )
    return _record_alert(alert, notification_kind, subject, message)


def _record_alert(alert, notification_kind: str, subject: str, message: str) -> bool:
    """Record the alert once per policy, window, period and kind; warn the group and the IT admins.

    The alert row and its notifications are written in one transaction, so a crash leaves both or
    neither (and the next meter sends it). The emails go once that transaction has committed, and a
    mail failure is logged: the alert stands, in the portal. False when it was sent before."""
    from apps.accounts.models import Notification

    policy = alert.policy
    try:
        with transaction.atomic():
            alert.save()
            recipients = _alert_recipients(policy)
            Notification.objects.bulk_create(
                Notification(user=user, kind=notification_kind, message=message) for user in recipients
            )
            emails = [user.email for user in recipients if user.email]
            if emails:
                transaction.on_commit(lambda: _mail_alert(subject, message, emails, policy, alert.kind))
            events.notify(policy.group, "budget_alert", subject, message)
    except IntegrityError:
        return False
    return True


def _mail_alert(subject: str, message: str, emails: list[str], policy, kind: str) -> None:
    try:
        send_mail(subject, message, None, emails)
    except Exception:
        log.exception(
            "budget alert (%s) of %s not emailed to %s; it is in their portal notifications",
            kind,
            policy.group,
            ", ".join(emails),
        )


def run_meter(now=None) -> dict[str, int]:
    """The budget meter: between passes, detect time and money budget windows that crossed their
    alert threshold or were used up, and warn once per window and period. The pass itself stops
    used-up work."""
    from apps.ledger.budgets import budget_status, money_status
    from apps.ledger.models import BudgetAlert
    from apps.policies.models import ResourcePolicy
    from apps.policies.selectors import priced_policies

    now = now or timezone.now()
    budgeted = list(ResourcePolicy.objects.filter(budget_hours__isnull=False).select_related("group"))
    sent = {"threshold": 0, "used_up": 0}
    statuses = budget_status(budgeted, now=now)
    for policy in budgeted:
        for window in statuses[policy.pk].windows:
            if window.used_up and _send_alert(policy, window, BudgetAlert.Kind.USED_UP, now):
                sent["used_up"] += 1
            if window.over_threshold and _send_alert(policy, window, BudgetAlert.Kind.THRESHOLD, now):
                sent["threshold"] += 1
    priced = list(priced_policies())
    money = money_status(priced, now=now) if priced else {}
    for policy in priced:
        for window in money.get(policy.pk, ()):
            if window.used_up and _send_money_alert(policy, window, BudgetAlert.Kind.USED_UP, now):
                sent["used_up"] += 1
            if window.over_threshold and _send_money_alert(policy, window, BudgetAlert.Kind.THRESHOLD, now):
                sent["threshold"] += 1
    return sent


@contextmanager
def _counting_queries():
    count = [0]

    def counter(execute, sql, params, many, context):
        count[0] += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter):
        yield count


def _load_consistent(now=None):
    """Read the whole snapshot from one consistent view of the database (a repeatable-read
    transaction of its own; inside a caller's transaction, that transaction's view).

    In a transaction of its own the held snapshot is brought up to date (``apps.engine.held``);
    inside a caller's, everything is read afresh (the caller's uncommitted writes must not be held).

    Without ``now``, the pass's time is taken once the view is fixed: every end the view shows
    was stamped before it committed, so the pass never places work into freed room at a time
    before that room was freed (the ledger would charge both at once, above the pool's capacity).
    """
    outermost = not connection.in_atomic_block
    with transaction.atomic():
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql" and outermost:
                cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            if now is None:
                cursor.execute("SELECT 1")  # the view is fixed by the transaction's first query
                now = timezone.now()
        return held.load(now) if outermost else load(now)


def _count_pass(record: PassRecord) -> None:
    """Add a recorded pass to the running totals (in the caller's transaction)."""
    name = PassTotals.skipped_name(record.skip_reason) if record.skipped else PassTotals.RAN
    changes = {"count": F("count") + 1}
    if not record.skipped:
        changes["duration_ms"] = F("duration_ms") + record.duration_ms
        for bound in PASS_BUCKETS_MS:
            if record.duration_ms <= bound:
                changes[f"le_{bound}"] = F(f"le_{bound}") + 1
    if not PassTotals.objects.filter(name=name).update(**changes):
        PassTotals.objects.get_or_create(name=name)
        PassTotals.objects.filter(name=name).update(**changes)


def runner() -> str:
    """This process, as a pass's record names it (read at each pass: a forked child has its own)."""
    return f"{socket.gethostname()}:{os.getpid()}"[:80]


def _record(**fields) -> PassRecord:
    """Write a pass's record and count it in the totals, in the caller's transaction or its own."""
    with transaction.atomic(savepoint=False):
        record = PassRecord.objects.create(runner=runner(), **fields)
        _count_pass(record)
    return record


def run_pass(now=None) -> PassRecord:
    """One pass of the compute policy engine: fill reservations, reclaim, lend. Dated quota loans
    past their date are given back first (``apps.policies.loans.end_due``), also while disabled.

    Skipped (and recorded as such) when the engine is disabled or another process holds the
    pass lock. The decisions and the pass's record are written in one transaction, so a crash
    leaves the whole pass, recorded, or none of it.
    """
    started = timezone.now()
    with exclusive_pass() as acquired:
        if not acquired:
            return _record(started_at=started, skipped=True, skip_reason="another pass running")
        loans.end_due(now)
        if not engine_enabled():
            return _record(started_at=started, skipped=True, skip_reason="disabled")
        started = timezone.now()
        wake.pass_starting()
        held.before_pass()
        with _counting_queries() as queries:
            t0 = time.perf_counter()
            loaded = _load_consistent(now)
            now = loaded.snapshot.now
            t1 = time.perf_counter()
            decisions = core.allocate(loaded.snapshot)
            t2 = time.perf_counter()
            with transaction.atomic():
                applied = apply(loaded, decisions, now)
                t3 = time.perf_counter()
                waiting = sum(len(queue) for queue in loaded.snapshot.waiting.values())
                running = sum(1 for task in loaded.snapshot.placed if not task.preempting)
                record = _record(
                    started_at=started,
                    duration_ms=(t3 - t0) * 1000,
                    load_ms=(t1 - t0) * 1000,
                    decide_ms=(t2 - t1) * 1000,
                    apply_ms=(t3 - t2) * 1000,
                    placed=applied.placed,
                    preempted=applied.preempted,
                    waiting=waiting - applied.placed,
                    running=running - applied.preempted + applied.placed,
                    queries=queries[0],
                )
                if applied.placed:
                    pools = {placement.pool for placement in decisions.placements}
                    transaction.on_commit(lambda: wake.notify_placed(pools))
    _log_pass(record, applied)
    held.after_pass()
    if record.pk % 600 == 0:
        prune_pass_log(now)
    return record


def _log_pass(record: PassRecord, applied) -> None:
    """A line per placement and preemption, with the pass, task and pool ids, and the pass's own
    line: at INFO when it changed anything, else at DEBUG (a pass a second)."""
    for task_id, pool_id in applied.placements:
        pass_log.info("task placed", extra={"pass_id": record.pk, "task_id": task_id, "pool_id": pool_id})
    for task_id, pool_id, reason in applied.preemptions:
        fields = {"pass_id": record.pk, "task_id": task_id, "pool_id": pool_id, "reason": reason}
        pass_log.info("task preempted", extra=fields)
    pass_log.log(
        logging.INFO if applied.placed or applied.preempted else logging.DEBUG,
        "engine pass",
        extra={
            "pass_id": record.pk,
            "duration_ms": round(record.duration_ms, 3),
            "placed": record.placed,
            "preempted": record.preempted,
            "waiting": record.waiting,
            "running": record.running,
            "queries": record.queries,
        },
    )


def prune_pass_log(now) -> int:
    """Keep ``PASS_LOG_DAYS`` of the pass log."""
    cutoff = now - timedelta(days=settings.PASS_LOG_DAYS)
    return PassRecord.objects.filter(started_at__lt=cutoff).delete()[0]
