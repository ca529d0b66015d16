"""Several time budget windows on one policy, live: a policy with 1 budget hour a day and 10 a
month is stopped by whichever window is used up (the event names it), resumes only when every
window has budget left, and the meter alerts once per window and period."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail

from apps.accounts import services as accounts
from apps.accounts.models import Membership, Notification
from apps.engine import core, loader, services
from apps.ledger.budgets import budget_status
from apps.ledger.models import BudgetAlert, UsageInterval
from apps.policies import services as policies
from apps.tasks.models import Task, TaskEvent
from tests.engine_live.test_pass import T0, states, submit
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db
HOUR = core.UNITS_PER_HOUR


@pytest.fixture
def windows():
    """Agents: 1 budget hour a day (its own window) and 10 a month (a further window)."""
    pool = PoolFactory(name="onprem", capacity=8)
    profile = ProfileFactory(gpus=1, time_weight=Decimal("1"))
    policies.link_pool(profile, pool)
    policy = policies.create_policy(
        group=GroupFactory(name="Agents"),
        reservation=4,
        limit=8,
        budget_hours=1,
        budget_period="day",
        alert_threshold=50,
    )
    policies.set_budget_windows(policy, {"month": Decimal(10)})
    member = UserFactory(username="member", email="member@example.test")
    accounts.add_membership(user=member, group=policy.group, role=Membership.Role.MEMBER)
    return pool, policies.connect(policy=policy, profile=profile)


def used_earlier(resource, pool, hours: float, start):
    """Budget hours the policy spent earlier in the month, by work that has ended."""
    user = UserFactory()
    task = Task.objects.create(
        user=user, compute_resource=resource, gpus=1, command="x", state=Task.State.SUCCEEDED
    )
    UsageInterval.objects.create(
        task=task,
        user=user,
        policy=resource.policy,
        group=resource.policy.group,
        compute_resource=resource,
        pool=pool,
        gpu_type=pool.gpu_type,
        gpus=Decimal(1),
        time_weight=Decimal(1),
        start=start,
        end=start + timedelta(hours=hours),
    )


def budget_stops():
    return list(
        TaskEvent.objects.filter(kind=TaskEvent.Kind.PREEMPTED).order_by("pk").values_list("reason", "detail")
    )


def test_the_loader_gives_the_core_every_window_with_its_own_use(windows):
    pool, resource = windows
    used_earlier(resource, pool, 3, T0 - timedelta(days=2))  # this month, not today
    used_earlier(resource, pool, 0.5, T0 - timedelta(hours=2))  # today
    (core_policy,) = [p for p in loader.load(T0).snapshot.policies if p.id == str(resource.policy_id)]
    assert [(b.period, b.limit, b.used) for b in core_policy.budgets] == [
        ("day", HOUR, HOUR // 2),
        ("month", 10 * HOUR, 7 * HOUR // 2),
    ]


def test_the_day_window_used_up_stops_the_work_with_reason_budget_naming_the_day(windows):
    pool, resource = windows
    (task,) = submit(resource, 1)
    services.run_pass(now=T0)
    assert states([task]) == ["placed"]
    services.run_pass(now=T0 + timedelta(minutes=61))
    assert states([task]) == ["queued"]
    assert budget_stops() == [("budget", {"window": "day"})]
    (message,) = Notification.objects.filter(kind=Notification.Kind.PREEMPTED).values_list(
        "message", flat=True
    )
    assert message.endswith("its group's daily time budget is used up.")
    services.run_pass(now=T0 + timedelta(minutes=62))
    verdict = Task.objects.get(pk=task.pk).verdict
    assert (verdict["rule"], verdict["window"]) == ("budget_used_up", "day")
    assert verdict["reset_at"] == "2026-05-05T00:00:00+00:00"
    # the next day every window has budget left again (the month has 9 h): the work resumes
    services.run_pass(now=T0 + timedelta(hours=16, minutes=1))
    assert states([task]) == ["placed"]


def test_the_month_window_used_up_stops_the_work_with_reason_budget_naming_the_month(windows):
    pool, resource = windows
    used_earlier(resource, pool, 9.5, T0 - timedelta(days=2))  # 0.5 h of the month left
    (task,) = submit(resource, 1)
    services.run_pass(now=T0)
    assert states([task]) == ["placed"]
    services.run_pass(now=T0 + timedelta(minutes=31))
    assert states([task]) == ["queued"]
    assert budget_stops() == [("budget", {"window": "month"})]
    services.run_pass(now=T0 + timedelta(minutes=32))
    verdict = Task.objects.get(pk=task.pk).verdict
    assert (verdict["rule"], verdict["window"]) == ("budget_used_up", "month")
    # the day resets, the month does not: the work keeps waiting
    services.run_pass(now=T0 + timedelta(hours=16, minutes=1))
    assert states([task]) == ["queued"]


def test_the_status_shows_both_windows_and_the_binding_one(windows):
    pool, resource = windows
    used_earlier(resource, pool, 9.5, T0 - timedelta(days=2))
    used_earlier(resource, pool, 0.25, T0 - timedelta(hours=1))
    status = budget_status([resource.policy], now=T0)[resource.policy_id]
    assert [(w.period, w.budget_hours, w.used_hours, w.left_hours) for w in status.windows] == [
        ("day", Decimal(1), Decimal("0.250"), Decimal("0.750")),
        ("month", Decimal(10), Decimal("9.750"), Decimal("0.250")),
    ]
    assert (status.period, status.left_hours, status.used_up) == ("month", Decimal("0.250"), False)


def test_the_meter_alerts_once_per_window_and_names_it(windows, django_capture_on_commit_callbacks):
    pool, resource = windows
    used_earlier(resource, pool, 9, T0 - timedelta(days=2))  # the month at 90%, the day at 0%

    def meter(now):
        with django_capture_on_commit_callbacks(execute=True):
            return services.run_meter(now=now)

    assert meter(T0) == {"threshold": 1, "used_up": 0}
    assert meter(T0 + timedelta(minutes=1)) == {"threshold": 0, "used_up": 0}
    (task,) = submit(resource, 1)
    services.run_pass(now=T0)
    # 31 minutes later the day is at 52% (threshold) and the month at 95%: only the day is new
    assert meter(T0 + timedelta(minutes=31)) == {"threshold": 1, "used_up": 0}
    # 61 minutes: the day (1.017 of 1 h) and the month (10.017 of 10 h) are both used up
    assert meter(T0 + timedelta(minutes=61)) == {"threshold": 0, "used_up": 2}
    assert meter(T0 + timedelta(minutes=62)) == {"threshold": 0, "used_up": 0}
    alerts = sorted(BudgetAlert.objects.values_list("period", "kind"))
    assert alerts == [("day", "threshold"), ("day", "used_up"), ("month", "threshold"), ("month", "used_up")]
    subjects = [m.subject for m in mail.outbox]
    assert any("monthly time budget" in s and "90 %" in s for s in subjects)
    assert any("daily time budget" in s and "used up" in s for s in subjects)
