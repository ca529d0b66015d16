"""The demo estate at scale (``apps.portal.demo_large``), built small here: the shape asked for, and
rows as the services and the ledger would write them (each interval its task's, priced, the
rollups the ledger's own)."""

from decimal import Decimal

import pytest
from django.db.models import Sum

from apps.accounts.models import Group, User
from apps.core.gpus import to_milli
from apps.ledger import rollups
from apps.ledger.models import DailyRollup, HourlyRollup, UsageInterval
from apps.ledger.report_spec import ReportSpec
from apps.ledger.selectors import usage_report
from apps.policies.models import ProfilePool, ResourcePolicy
from apps.portal import demo, demo_large
from apps.pricing.selectors import currencies
from apps.tasks.models import Task, TaskEvent

pytestmark = pytest.mark.django_db

TINY = demo_large.Size(groups=60, pools=12, tasks=300, intervals=6_000)


@pytest.fixture
def estate():
    demo.seed(password="!")
    return demo_large.seed(TINY, out=lambda line: None)


def test_the_estate_at_scale_has_its_size_in_four_levels_and_a_second_seed_adds_nothing(estate):
    assert Group.objects.count() == TINY.groups
    levels = set(Group.objects.values_list("kind", flat=True))
    assert levels == {"organisation", "business_unit", "department", "team"}
    assert not Group.objects.filter(kind="team", parent__kind__in=["organisation", "business_unit"]).exists()
    assert (Task.objects.count(), UsageInterval.objects.count()) == (TINY.tasks, TINY.intervals)
    assert estate["tasks"] == TINY.tasks and estate["usage intervals"] == TINY.intervals
    assert demo_large.seed(TINY, out=lambda line: None) == {}
    assert Task.objects.count() == TINY.tasks


def test_every_policy_of_the_estate_at_scale_passes_the_envelope_rules(estate):
    for policy in ResourcePolicy.objects.select_related("group__parent"):
        policy.full_clean()


def test_each_interval_carries_its_tasks_user_project_policy_pool_and_the_profiles_weight(estate):
    intervals = UsageInterval.objects.select_related("task__compute_resource__profile", "pool")
    links = set(ProfilePool.objects.values_list("profile_id", "pool_id"))
    for interval in intervals:
        task, resource = interval.task, interval.task.compute_resource
        assert (interval.user_id, interval.project_id) == (task.user_id, task.project_id)
        assert interval.compute_resource_id == resource.pk and interval.policy_id == resource.policy_id
        assert interval.group_id == resource.policy.group_id
        assert (resource.profile_id, interval.pool_id) in links
        assert interval.gpu_type_id == interval.pool.gpu_type_id
        assert (interval.gpus, interval.time_weight) == (task.gpus, resource.profile.time_weight)
    open_ones = UsageInterval.objects.filter(end__isnull=True)
    assert set(open_ones.values_list("task__state", flat=True)) == {"running"}
    assert not Task.objects.filter(state="running").exclude(intervals__end__isnull=True).exists()
    assert TaskEvent.objects.filter(kind="submitted").count() == TINY.tasks


def test_the_rollups_of_the_estate_at_scale_hold_every_closed_hour_of_its_intervals(estate):
    until = rollups.built_until()
    counted = sum(
        (rollups.to_ms(min(end or until, until)) - rollups.to_ms(start)) * to_milli(gpus)
        for start, end, gpus in UsageInterval.objects.filter(start__lt=until).values_list(
            "start", "end", "gpus"
        )
    )
    assert HourlyRollup.objects.aggregate(s=Sum("gpu_us"))["s"] == counted > 0
    assert DailyRollup.objects.aggregate(s=Sum("gpu_us"))["s"] <= counted


def test_the_year_of_usage_is_priced_from_its_first_day(estate):
    first = UsageInterval.objects.order_by("start").first().start
    until = rollups.built_until()
    spec = ReportSpec(("gpu_type",), first.replace(minute=0, second=0, microsecond=0), until, currencies()[0])
    report = usage_report(User.objects.get(username="finance"), spec, until)
    assert report.total.gpu_us > 0 and report.total.cost > 0
    assert all(hours == Decimal(0) for hours in report.unpriced.values())
