"""Usage reports: cuts, UTC periods, the group hierarchy rolled up, prices split at a change,
unused capacity, and who sees what."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from apps.ledger import rollups
from apps.ledger.report_spec import ReportSpec, period_range
from apps.ledger.selectors import usage_report
from apps.pools import services as pools
from apps.pricing import services as pricing
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db

APRIL = (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))
NOW = datetime(2026, 5, 10, 12, 0, tzinfo=UTC)


@pytest.fixture
def estate():
    return make_estate()


def spec(*dims, start=APRIL[0], end=APRIL[1], currency="EUR", **options) -> ReportSpec:
    return ReportSpec(dims=dims or ("group",), start=start, end=end, currency=currency, **options)


def rows(report) -> dict[tuple, tuple]:
    return {
        tuple(r.labels[k] for k in r.labels if not k.startswith("group_")): (
            r.figures.gpu_hours,
            r.figures.budget_hours,
            r.figures.cost_amount,
        )
        for r in report.rows
    }


@pytest.mark.parametrize(
    ("period", "day", "start", "end"),
    [
        ("day", date(2026, 4, 15), datetime(2026, 4, 15, tzinfo=UTC), datetime(2026, 4, 16, tzinfo=UTC)),
        ("week", date(2026, 4, 19), datetime(2026, 4, 13, tzinfo=UTC), datetime(2026, 4, 20, tzinfo=UTC)),
        ("month", date(2026, 2, 28), datetime(2026, 2, 1, tzinfo=UTC), datetime(2026, 3, 1, tzinfo=UTC)),
        ("quarter", date(2026, 5, 31), datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 7, 1, tzinfo=UTC)),
        ("quarter", date(2026, 11, 2), datetime(2026, 10, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC)),
    ],
)
def test_periods_follow_the_utc_calendar_weeks_from_monday(period, day, start, end):
    assert period_range(period, day) == (start, end)


@pytest.fixture
def april(estate):
    """Two teams of one department and a team of another, on two GPU types, in April."""
    u = estate.users
    day = datetime(2026, 4, 10, tzinfo=UTC)
    record(
        estate,
        estate.team_a,
        u["alice"],
        estate.onprem,
        day,
        day + timedelta(hours=10),
        gpus="2",
        project=estate.project_a,
    )
    record(
        estate, estate.team_a, u["lead"], estate.cloud, day, day + timedelta(hours=1), gpus="8", weight="2"
    )
    record(
        estate,
        estate.team_b,
        u["bob"],
        estate.onprem,
        day,
        day + timedelta(hours=4),
        gpus="0.25",
        weight="0.25",
    )
    record(estate, estate.team_c, u["carol"], estate.cloud, day, day + timedelta(hours=3), gpus="1")
    record(estate, estate.dept, u["head"], estate.onprem, day, day + timedelta(hours=2), gpus="1")
    # outside April: must not count
    record(
        estate, estate.team_a, u["alice"], estate.onprem, day - timedelta(days=20), day - timedelta(days=19)
    )
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 1, 1), via="system"
    )
    pricing.create_price(
        gpu_type=estate.h100, per_gpu_hour="3.5", effective_from=date(2026, 1, 1), via="system"
    )
    rollups.refresh(NOW)
    return estate


def test_a_group_row_includes_its_subtree_and_the_hierarchy_adds_up(april):
    report = usage_report(april.users["fin"], spec("group"), now=NOW)
    by_group = {r.labels["group"]: r.figures.gpu_hours for r in report.rows}
    assert by_group == {
        "Acme": Decimal("34.000"),
        "Research": Decimal("34.000"),
        "Language": Decimal("31.000"),  # 2 own + 20 + 8 + 1
        "Pretraining": Decimal("28.000"),
        "Alignment": Decimal("1.000"),
        "Vision": Decimal("3.000"),
        "Perception": Decimal("3.000"),
    }
    assert report.total.gpu_hours == Decimal("34.000")
    path = {r.labels["group"]: r.labels["group_path"] for r in report.rows}
    assert path["Pretraining"] == "Acme / Research / Language / Pretraining"


def test_a_level_keeps_the_groups_of_one_kind_and_they_add_up_to_the_total(april):
    report = usage_report(april.users["cio"], spec("group", level="department"), now=NOW)
    assert {r.labels["group"] for r in report.rows} == {"Language", "Vision"}
    assert sum(r.figures.gpu_us for r in report.rows) == report.total.gpu_us


def test_cuts_by_project_user_gpu_type_and_pool(april):
    fin = april.users["fin"]
    assert rows(usage_report(fin, spec("gpu_type"), now=NOW)) == {
        ("A100-80GB",): (Decimal("23.000"), Decimal("13.000"), Decimal("46.00")),
        ("H100",): (Decimal("11.000"), Decimal("5.000"), Decimal("38.50")),
    }
    by_user = rows(usage_report(fin, spec("user"), now=NOW))
    assert by_user[("alice",)] == (Decimal("20.000"), Decimal("10.000"), Decimal("40.00"))
    assert by_user[("bob",)] == (Decimal("1.000"), Decimal("1.000"), Decimal("2.00"))
    by_project = rows(usage_report(fin, spec("project"), now=NOW))
    assert by_project[("Pretraining / llm-7b",)][0] == Decimal("20.000")
    assert by_project[("(no project)",)][0] == Decimal("14.000")
    by_pool = rows(usage_report(fin, spec("pool", "gpu_type"), now=NOW))
    assert set(by_pool) == {("onprem", "A100-80GB"), ("cloud", "H100")}


def test_weight_makes_budget_hours_per_task_whatever_its_gpus(april):
    report = usage_report(april.users["fin"], spec("user"), now=NOW)
    lead = next(r for r in report.rows if r.labels["user"] == "lead")
    assert (lead.figures.gpu_hours, lead.figures.budget_hours) == (Decimal("8.000"), Decimal("2.000"))


def test_a_price_change_in_the_middle_of_a_period_splits_the_cost_at_the_change(estate):
    alice = estate.users["alice"]
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 4, 1), via="system"
    )
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour="3", effective_from=date(2026, 4, 15), via="system"
    )
    # 14 April 20:00 to 15 April 04:00: 4 h at 2, then 4 h at 3, on 2 GPUs
    record(
        estate,
        estate.team_a,
        alice,
        estate.onprem,
        datetime(2026, 4, 14, 20, tzinfo=UTC),
        datetime(2026, 4, 15, 4, tzinfo=UTC),
        gpus="2",
    )
    for built in (None, NOW):
        if built:
            rollups.refresh(built)
        report = usage_report(estate.users["fin"], spec("user"), now=NOW)
        assert report.total.cost_amount == Decimal("40.00")  # 8 x 2 + 8 x 3


def test_a_changed_price_shows_at_once_without_a_rebuild(april):
    price = april.a100.prices.get()
    pricing.update_price(price, per_gpu_hour=Decimal("1"), via="system")
    report = usage_report(april.users["fin"], spec("gpu_type"), now=NOW)
    assert rows(report)[("A100-80GB",)][2] == Decimal("23.00")


def test_use_without_a_price_has_no_cost_and_is_reported(estate):
    record(
        estate, estate.team_a, estate.users["alice"], estate.cloud, APRIL[0], APRIL[0] + timedelta(hours=2)
    )
    report = usage_report(estate.users["fin"], spec("gpu_type"), now=NOW)
    assert report.total.cost_amount == 0 and report.unpriced == {"H100": Decimal("2.000")}


def test_a_report_of_the_current_period_counts_running_work_up_to_now(estate):
    now = datetime(2026, 4, 20, 12, 30, tzinfo=UTC)
    record(
        estate,
        estate.team_a,
        estate.users["alice"],
        estate.onprem,
        datetime(2026, 4, 20, 9, tzinfo=UTC),
        None,
        gpus="2",
    )
    rollups.refresh(now - timedelta(hours=2))  # rollups lag behind: built until 10:00
    report = usage_report(estate.users["alice"], spec("user"), now=now)
    assert report.total.gpu_hours == Decimal("7.000") and report.stop == now


def test_unused_capacity_shown_separately_is_capacity_hours_minus_use_priced(estate):
    day = datetime(2026, 4, 10, tzinfo=UTC)
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 1, 1), via="system"
    )
    record(
        estate, estate.team_a, estate.users["alice"], estate.onprem, day, day + timedelta(hours=24), gpus="2"
    )
    pools.update_pool(estate.cloud, enabled=False, now=day - timedelta(days=1), reason="retired")
    one_day = spec("group", start=day, end=day + timedelta(days=1), idle="separate")
    report = usage_report(estate.users["fin"], one_day, now=NOW)
    assert report.unused.gpu_hours == Decimal("144.000")  # 8 GPUs x 24 h - 48 GPU-hours
    assert report.unused.cost_amount == Decimal("288.00")
    assert report.total.cost_amount == Decimal("96.00")


def test_unused_capacity_spread_goes_to_the_users_of_each_pool_in_proportion(estate):
    day = datetime(2026, 4, 10, tzinfo=UTC)
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour="1", effective_from=date(2026, 1, 1), via="system"
    )
    pricing.create_price(
        gpu_type=estate.h100, per_gpu_hour="1", effective_from=date(2026, 1, 1), via="system"
    )
    record(
        estate, estate.team_a, estate.users["alice"], estate.onprem, day, day + timedelta(hours=24), gpus="3"
    )
    record(
        estate, estate.team_b, estate.users["bob"], estate.onprem, day, day + timedelta(hours=24), gpus="1"
    )
    report = usage_report(
        estate.users["fin"], spec("group", start=day, end=day + timedelta(days=1), idle="spread"), now=NOW
    )
    shares = {r.labels["group"]: r.figures.idle_amount for r in report.rows}
    assert shares["Pretraining"] == Decimal("72.00") and shares["Alignment"] == Decimal(
        "24.00"
    )  # 96 idle, 3:1
    assert report.unused.gpu_hours == Decimal("96.000")  # the cloud pool: nobody used it, so not spread
    assert report.total.total_cost == Decimal("192.00")  # 96 used + 96 spread


def test_finance_and_it_see_all_a_head_their_department_a_lead_their_team_a_member_their_own(april):
    def seen(name, dims=("user",)):
        return {r.labels["user"] for r in usage_report(april.users[name], spec(*dims), now=NOW).rows}

    everyone = {"alice", "lead", "bob", "carol", "head"}
    assert seen("fin") == seen("it") == seen("cio") == everyone
    assert seen("head") == {"alice", "lead", "bob", "head"}
    assert seen("lead") == {"alice", "lead"}
    assert seen("alice") == {"alice"}
    assert seen("carol") == {"carol"}


def test_a_head_sees_the_department_subtree_rolled_up_and_nothing_above(april):
    report = usage_report(april.users["head"], spec("group"), now=NOW)
    assert {r.labels["group"] for r in report.rows} == {"Language", "Pretraining", "Alignment"}
    assert report.total.gpu_hours == Decimal("31.000")


def test_a_member_sees_only_their_own_use_even_in_their_groups_row(april):
    report = usage_report(april.users["alice"], spec("group"), now=NOW)
    assert [(r.labels["group"], r.figures.gpu_hours) for r in report.rows] == [
        ("Pretraining", Decimal("20.000"))
    ]
