"""Hourly and daily rollups: exact cuts at UTC hours, running work up to the last closed hour,
idempotent rebuilds, and refreshes that catch late and back-dated closes."""

from datetime import UTC, datetime, timedelta

import pytest
from django.core.management import call_command
from django.db.models import Sum

from apps.ledger import rollups
from apps.ledger.models import DailyGroupRollup, DailyRollup, HourlyRollup, RollupState
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 3, 30, 22, 0, tzinfo=UTC)  # a Monday, two hours before the end of March
US_PER_HOUR = 3_600_000_000


@pytest.fixture
def estate():
    return make_estate()


def hourly(**filters) -> dict[datetime, int]:
    rows = HourlyRollup.objects.filter(**filters).values("hour").annotate(gpu=Sum("gpu_us")).order_by("hour")
    return {row["hour"]: row["gpu"] for row in rows}


def test_an_interval_is_cut_at_utc_hours_and_its_pieces_add_up_to_its_length(estate):
    alice = estate.users["alice"]
    record(
        estate,
        estate.team_a,
        alice,
        estate.onprem,
        T0 + timedelta(minutes=30),
        T0 + timedelta(hours=2, minutes=15),
    )
    rollups.refresh(T0 + timedelta(hours=5))
    assert hourly() == {
        T0: US_PER_HOUR // 2,
        T0 + timedelta(hours=1): US_PER_HOUR,
        T0 + timedelta(hours=2): US_PER_HOUR // 4,
    }


def test_a_quarter_gpu_for_an_hour_is_a_quarter_gpu_hour_and_weight_counts_per_task(estate):
    record(
        estate, estate.team_a, estate.users["alice"], estate.onprem, T0, T0 + timedelta(hours=1), gpus="0.25"
    )
    record(
        estate,
        estate.team_a,
        estate.users["alice"],
        estate.cloud,
        T0,
        T0 + timedelta(hours=1),
        gpus="8",
        weight="2",
    )
    rollups.refresh(T0 + timedelta(hours=2))
    by_pool = {r.pool_id: r for r in HourlyRollup.objects.all()}
    assert by_pool[estate.onprem.pk].gpu_us == US_PER_HOUR // 4
    assert by_pool[estate.onprem.pk].budget_us == US_PER_HOUR
    assert by_pool[estate.cloud.pk].gpu_us == 8 * US_PER_HOUR
    assert by_pool[estate.cloud.pk].budget_us == 2 * US_PER_HOUR


def test_times_count_in_whole_milliseconds(estate):
    start = T0 + timedelta(microseconds=999)  # truncated to T0
    record(
        estate,
        estate.team_a,
        estate.users["alice"],
        estate.onprem,
        start,
        T0 + timedelta(seconds=1, microseconds=1500),
    )
    rollups.refresh(T0 + timedelta(hours=1))
    assert hourly() == {T0: 1001 * 1000}  # 1001 ms x 1000 milli-GPUs


def test_running_work_counts_up_to_the_last_closed_hour_only(estate):
    record(estate, estate.team_a, estate.users["alice"], estate.onprem, T0, None)
    rollups.refresh(T0 + timedelta(hours=2, minutes=40))
    assert hourly() == {T0: US_PER_HOUR, T0 + timedelta(hours=1): US_PER_HOUR}
    assert RollupState.objects.get().built_until == T0 + timedelta(hours=2)


def test_a_day_row_is_the_sum_of_its_hours_once_the_day_has_closed(estate):
    record(
        estate,
        estate.team_a,
        estate.users["alice"],
        estate.onprem,
        T0 - timedelta(days=1),
        T0 + timedelta(hours=3),
    )
    rollups.refresh(T0 + timedelta(hours=1))
    assert set(DailyRollup.objects.values_list("day", flat=True)) == {(T0 - timedelta(days=1)).date()}
    rollups.refresh(T0 + timedelta(hours=4))
    days = dict(DailyRollup.objects.values_list("day", "gpu_us"))
    assert days == {(T0 - timedelta(days=1)).date(): 2 * US_PER_HOUR, T0.date(): 24 * US_PER_HOUR}


def test_the_daily_rows_without_user_and_project_are_the_sums_of_the_daily_rows(estate):
    u = estate.users
    day = T0 - timedelta(hours=22)  # 30 March 00:00
    record(
        estate,
        estate.team_a,
        u["alice"],
        estate.onprem,
        day,
        day + timedelta(hours=5),
        project=estate.project_a,
    )
    record(estate, estate.team_a, u["lead"], estate.onprem, day, day + timedelta(hours=2), gpus="0.5")
    record(estate, estate.team_b, u["bob"], estate.cloud, day, day + timedelta(hours=1))
    rollups.refresh(T0 + timedelta(hours=3))
    by_group = DailyGroupRollup.objects.values_list("group_id", "pool_id", "gpu_us", "budget_us")
    assert sorted(by_group) == [
        (estate.team_a.pk, estate.onprem.pk, 6 * US_PER_HOUR, 7 * US_PER_HOUR),
        (estate.team_b.pk, estate.cloud.pk, US_PER_HOUR, US_PER_HOUR),
    ]
    assert DailyRollup.objects.count() == 3


def test_rebuilding_is_idempotent_and_recomputes_whatever_the_tables_hold(estate):
    record(estate, estate.team_a, estate.users["alice"], estate.onprem, T0, T0 + timedelta(hours=3), gpus="2")
    rollups.refresh(T0 + timedelta(hours=4))
    before = sorted(HourlyRollup.objects.values_list("hour", "gpu_us", "budget_us"))
    HourlyRollup.objects.filter(hour=T0).update(gpu_us=1)
    DailyRollup.objects.all().delete()
    rollups.rebuild(T0 - timedelta(days=1), T0 + timedelta(days=1), now=T0 + timedelta(hours=4))
    rollups.rebuild(T0 - timedelta(days=1), T0 + timedelta(days=1), now=T0 + timedelta(hours=4))
    assert sorted(HourlyRollup.objects.values_list("hour", "gpu_us", "budget_us")) == before
    assert DailyRollup.objects.get().gpu_us == 2 * 2 * US_PER_HOUR  # the two hours of 30 March


def test_a_rebuild_ending_mid_day_sums_that_closed_day_again_from_its_hours(estate):
    day = datetime(2026, 3, 10, tzinfo=UTC)
    fixed = record(estate, estate.team_a, estate.users["alice"], estate.onprem, day, day + timedelta(hours=2))
    record(
        estate,
        estate.team_a,
        estate.users["bob"],
        estate.onprem,
        day + timedelta(hours=20),
        day + timedelta(hours=21),
    )
    now = day + timedelta(days=3)
    rollups.refresh(now)
    assert DailyRollup.objects.filter(day=day.date()).aggregate(g=Sum("gpu_us"))["g"] == 3 * US_PER_HOUR
    fixed.end = day + timedelta(hours=1)
    fixed.save()
    rollups.rebuild(day, day + timedelta(hours=12), now=now)
    daily = DailyRollup.objects.filter(day=day.date()).aggregate(g=Sum("gpu_us"))["g"]
    assert daily == sum(hourly(hour__date=day.date()).values()) == 2 * US_PER_HOUR
    group_daily = DailyGroupRollup.objects.filter(day=day.date()).aggregate(g=Sum("gpu_us"))["g"]
    assert group_daily == 2 * US_PER_HOUR


def test_a_rebuild_leaves_the_daily_rows_of_a_day_not_yet_closed_to_the_hourly_rows(estate):
    day = datetime(2026, 3, 10, tzinfo=UTC)
    record(estate, estate.team_a, estate.users["alice"], estate.onprem, day, day + timedelta(hours=2))
    rollups.rebuild(day, day + timedelta(hours=6), now=day + timedelta(hours=6, minutes=5))
    assert sum(hourly().values()) == 2 * US_PER_HOUR
    assert not DailyRollup.objects.exists()


def test_a_refresh_recomputes_the_last_built_hour_for_late_commits(estate):
    rollups.refresh(T0 + timedelta(hours=1, minutes=1))
    # committed after that refresh, but placed at 22:59:59
    record(
        estate,
        estate.team_a,
        estate.users["alice"],
        estate.onprem,
        T0 + timedelta(minutes=59, seconds=59),
        None,
    )
    rollups.refresh(T0 + timedelta(hours=1, minutes=2))
    assert hourly() == {T0: 1000 * 1000}


def test_a_back_dated_close_of_a_running_interval_is_caught_by_the_next_refresh(estate):
    interval = record(estate, estate.team_a, estate.users["alice"], estate.onprem, T0, None)
    rollups.refresh(T0 + timedelta(hours=5, minutes=10))
    assert sum(hourly().values()) == 5 * US_PER_HOUR
    # the worker was lost: the interval closes at its last heartbeat, hours back
    interval.end = T0 + timedelta(hours=1, minutes=30)
    interval.save()
    rollups.refresh(T0 + timedelta(hours=5, minutes=20))
    assert hourly() == {T0: US_PER_HOUR, T0 + timedelta(hours=1): US_PER_HOUR // 2}
    assert DailyRollup.objects.get(day=T0.date()).gpu_us == 3 * US_PER_HOUR // 2


def test_the_first_refresh_starts_at_the_first_interval(estate):
    record(
        estate,
        estate.team_a,
        estate.users["alice"],
        estate.onprem,
        T0 - timedelta(days=40),
        T0 - timedelta(days=39),
    )
    rollups.refresh(T0)
    assert HourlyRollup.objects.aggregate(s=Sum("gpu_us"))["s"] == 24 * US_PER_HOUR
    assert DailyRollup.objects.aggregate(s=Sum("gpu_us"))["s"] == 24 * US_PER_HOUR
    assert DailyRollup.objects.earliest("day").day == (T0 - timedelta(days=40)).date()


def test_the_command_refreshes_or_rebuilds_a_range(estate, capsys):
    record(
        estate,
        estate.team_a,
        estate.users["alice"],
        estate.onprem,
        T0 - timedelta(days=3),
        T0 - timedelta(days=2),
    )
    call_command("rollup_usage")
    assert "rows written" in capsys.readouterr().out
    HourlyRollup.objects.all().delete()
    call_command(
        "rollup_usage", "--start", (T0 - timedelta(days=3)).date().isoformat(), "--end", T0.date().isoformat()
    )
    assert HourlyRollup.objects.aggregate(s=Sum("gpu_us"))["s"] == 24 * US_PER_HOUR


def test_the_command_refuses_half_a_range():
    from django.core.management.base import CommandError

    with pytest.raises(CommandError, match="both"):
        call_command("rollup_usage", "--start", "2026-03-01")


def test_the_celery_task_has_its_name_and_a_beat_entry_that_expires_with_its_interval(estate, settings):
    from apps.ledger.tasks import rollup

    assert rollup.name == "klique.ledger.rollup"
    entry = next(e for e in settings.CELERY_BEAT_SCHEDULE.values() if e["task"] == "klique.ledger.rollup")
    assert entry["options"]["expires"] == entry["schedule"] == settings.LEDGER_ROLLUP_INTERVAL_S
    record(
        estate,
        estate.team_a,
        estate.users["alice"],
        estate.onprem,
        T0 - timedelta(days=1),
        T0 - timedelta(hours=23),
    )
    rollup()
    assert HourlyRollup.objects.count() == 1


@pytest.mark.postgres
def test_on_postgresql_rows_are_written_with_copy_and_refreshes_take_turns(estate):
    from django.db import connection

    assert connection.vendor == "postgresql"
    for hour in range(30):
        record(
            estate,
            estate.team_b,
            estate.users["bob"],
            estate.cloud,
            T0 + timedelta(hours=hour),
            T0 + timedelta(hours=hour, minutes=30),
            gpus="0.5",
        )
    assert rollups.refresh(T0 + timedelta(days=3)) == 30 + 3 + 3  # 30 hourly rows, 3 + 3 daily rows
    assert HourlyRollup.objects.aggregate(s=Sum("gpu_us"))["s"] == 30 * US_PER_HOUR // 4
