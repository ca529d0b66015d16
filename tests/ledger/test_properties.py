"""Property tests over random ledgers: whatever the intervals (finished or running, across UTC day,
week and month boundaries, with a price change in the period) and however far the rollups are
built, every cut of a report totals exactly what the intervals say."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.accounts.models import Project
from apps.accounts.selectors import subtree_ids
from apps.ledger import rollups
from apps.ledger.models import DailyGroupRollup, DailyRollup, HourlyRollup, RollupState, UsageInterval
from apps.ledger.report_spec import ReportSpec, period_range
from apps.ledger.selectors import usage_report
from apps.pricing.models import Price
from tests.ledger.ledger_data import expected, make_estate, record

pytestmark = pytest.mark.django_db

# Saturday 28 March 2026: the window holds a Monday (30 March) and a new month (1 April).
WINDOW_START = datetime(2026, 3, 28, tzinfo=UTC)
WINDOW_US = 6 * 24 * 3600 * 10**6
US_PER_HOUR = 3_600_000_000

interval_strategy = st.tuples(
    st.integers(0, WINDOW_US),  # start
    st.one_of(st.none(), st.integers(0, 60 * 3600 * 10**6)),  # duration; None: still running
    st.sampled_from(["0.25", "0.5", "1", "2", "8"]),
    st.sampled_from(["0", "0.5", "1", "2"]),
    st.integers(0, 3),  # group
    st.integers(0, 2),  # user
    st.booleans(),  # pool
    st.integers(0, 2),  # project: none, or one of two
)


@pytest.fixture
def estate():
    return make_estate()


def exact(figures) -> dict:
    return {
        "gpu_hours": Fraction(figures.gpu_us, US_PER_HOUR),
        "budget_hours": Fraction(figures.budget_us, US_PER_HOUR),
        "cost": figures.cost,
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    drawn=st.lists(interval_strategy, max_size=14),
    now_us=st.integers(WINDOW_US // 3, WINDOW_US),
    built_fraction=st.one_of(st.none(), st.floats(0, 1)),
    change_day=st.integers(0, 5),
    new_price=st.decimals("0.0001", "9.9999", places=4),
)
def test_every_cut_totals_exactly_what_the_intervals_say(
    estate, drawn, now_us, built_fraction, change_day, new_price
):
    for model in (UsageInterval, HourlyRollup, DailyRollup, DailyGroupRollup, RollupState, Price):
        model.objects.all().delete()
    now = WINDOW_START + timedelta(microseconds=now_us)
    groups = [estate.dept, estate.team_a, estate.team_b, estate.team_c]
    users = [estate.users["alice"], estate.users["bob"], estate.users["carol"]]
    intervals = []
    projects = [None, estate.project_a, second_project(estate)]
    for start_us, duration_us, gpus, weight, g, u, cloud, p in drawn:
        start = WINDOW_START + timedelta(microseconds=min(start_us, now_us))
        end = None if duration_us is None else min(start + timedelta(microseconds=duration_us), now)
        pool = estate.cloud if cloud else estate.onprem
        intervals.append(
            record(
                estate, groups[g], users[u], pool, start, end, gpus=gpus, weight=weight, project=projects[p]
            )
        )

    change = (WINDOW_START + timedelta(days=change_day)).date()
    Price.objects.create(gpu_type=estate.a100, per_gpu_hour=Decimal("2.1"), effective_from=date(2026, 1, 1))
    Price.objects.create(gpu_type=estate.a100, per_gpu_hour=new_price, effective_from=change)
    Price.objects.create(
        gpu_type=estate.h100, per_gpu_hour=Decimal("3.4"), effective_from=change
    )  # none before
    midnight = datetime.combine(change, datetime.min.time(), tzinfo=UTC)
    prices = {
        estate.a100.pk: [(datetime(2026, 1, 1, tzinfo=UTC), Decimal("2.1")), (midnight, new_price)],
        estate.h100.pk: [(midnight, Decimal("3.4"))],
    }
    if built_fraction is not None:
        rollups.refresh(WINDOW_START + (now - WINDOW_START) * built_fraction)

    some_day = (WINDOW_START + timedelta(days=change_day)).date()
    ranges = [period_range(p, some_day) for p in ("day", "week", "month")]
    ranges += [(WINDOW_START + timedelta(hours=7), WINDOW_START + timedelta(days=3, hours=5))]
    for start, end in ranges:
        everything = expected(intervals, start, end, now, prices)
        for dims in [("group",), ("project",), ("user",), ("gpu_type",), ("pool",), ("user", "gpu_type")]:
            report = usage_report(estate.users["fin"], ReportSpec(dims, start, end, "EUR"), now=now)
            assert exact(report.total) == everything
            for row in report.rows:
                members = [i for i in intervals if _in_row(i, dims, row.key)]
                assert exact(row.figures) == expected(members, start, end, now, prices)
            if "group" not in dims:
                assert sum(r.figures.gpu_us for r in report.rows) == report.total.gpu_us


def second_project(estate):
    project, _ = Project.objects.get_or_create(group=estate.team_b, name="vision-v2")
    return project


def _in_row(interval, dims, key) -> bool:
    for dim, value in zip(dims, key, strict=True):
        if dim == "group":
            if interval.group_id not in subtree_ids([value]):
                return False
        elif getattr(interval, f"{dim}_id") != value:
            return False
    return True
