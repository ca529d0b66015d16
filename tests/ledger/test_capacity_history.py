"""Unused capacity over time: the capacity in force at each moment (the pools' capacity history),
not today's; a pool resized or disabled since counts as it was; utilisation beside the idle share."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from apps.ledger import exports
from apps.ledger.api.serializers import report_data
from apps.ledger.report_spec import ReportSpec
from apps.ledger.selectors import usage_report
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken
from apps.pricing import services as pricing
from apps.workers import services as protocol
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db

DAY = datetime(2026, 4, 10, tzinfo=UTC)
NOW = datetime(2026, 5, 10, 12, 0, tzinfo=UTC)


@pytest.fixture
def estate():
    estate = make_estate()
    for gpu_type in (estate.a100, estate.h100):
        pricing.create_price(
            gpu_type=gpu_type, per_gpu_hour="1", effective_from=date(2026, 1, 1), via="system"
        )
    return estate


def one_day(idle: str, *dims) -> ReportSpec:
    return ReportSpec(
        dims=dims or ("group",), start=DAY, end=DAY + timedelta(days=1), currency="EUR", idle=idle
    )


def test_a_capacity_change_inside_the_range_counts_each_capacity_for_its_hours(estate):
    # onprem: 8 GPUs until 06:00, 20 GPUs from then (history), and 4 GPUs now (a later change)
    pools.update_pool(estate.onprem, capacity=Decimal("20"), now=DAY + timedelta(hours=6), reason="new rack")
    pools.update_pool(estate.onprem, capacity=Decimal("4"), now=DAY + timedelta(days=3), reason="rack moved")
    pools.update_pool(estate.cloud, enabled=False, now=DAY - timedelta(days=1))
    record(
        estate, estate.team_a, estate.users["alice"], estate.onprem, DAY, DAY + timedelta(hours=24), gpus="2"
    )
    report = usage_report(estate.users["fin"], one_day("separate"), now=NOW)
    capacity = 8 * 6 + 20 * 18
    assert report.capacity_hours == Decimal(capacity)
    assert report.unused.gpu_hours == Decimal(capacity - 48)
    assert report.unused.cost_amount == Decimal(capacity - 48)
    assert report.utilisation == Decimal("11.8")  # 48 / 408


def test_a_pool_disabled_since_counts_for_the_time_it_was_enabled(estate):
    pools.update_pool(estate.cloud, enabled=False, now=DAY + timedelta(hours=12))
    pools.update_pool(estate.onprem, enabled=False, now=DAY + timedelta(days=5))
    report = usage_report(estate.users["fin"], one_day("separate"), now=NOW)
    assert report.unused.gpu_hours == Decimal(8 * 24 + 4 * 12)


def test_a_pool_created_after_the_range_has_no_unused_capacity_in_it(estate):
    pools.create_pool(
        name="later",
        kind="kubernetes",
        gpu_type=estate.a100,
        capacity=Decimal("100"),
        now=DAY + timedelta(days=2),
    )
    report = usage_report(estate.users["fin"], one_day("separate"), now=NOW)
    assert report.unused.gpu_hours == Decimal(8 * 24 + 4 * 24)


def test_spread_shows_the_idle_share_and_utilisation_beside_it_on_page_exports_and_api(estate):
    pools.update_pool(estate.cloud, enabled=False, now=DAY - timedelta(days=1))
    record(
        estate, estate.team_a, estate.users["alice"], estate.onprem, DAY, DAY + timedelta(hours=1), gpus="1"
    )
    report = usage_report(estate.users["fin"], one_day("spread"), now=NOW)
    (row,) = [r for r in report.records() if r["group"] == "Pretraining"]
    assert row["cost"] == Decimal("1.00") and row["unused_capacity"] == Decimal("191.00")
    assert row["unused_share"] == Decimal("99.5")  # 191 of 192
    lines = {line["group"]: line for line in report.summary_records()}
    assert lines["Capacity in force"]["gpu_hours"] == Decimal("192.000")
    assert lines["Capacity in force"]["utilisation"] == Decimal("0.5")  # 1 of 192 GPU-hours
    csv_lines = exports.table(report)
    header = csv_lines[0]
    assert "Unused capacity in total cost (%)" in header and "Utilisation of capacity (%)" in header
    capacity_line = next(line for line in csv_lines if line[0] == "Capacity in force")
    assert capacity_line[header.index("Utilisation of capacity (%)")] == "0.5"
    data = report_data(report)
    assert data["utilisation_pct"] == "0.5" and data["capacity_in_force"]["gpu_hours"] == "192.000"


def test_rows_by_pool_show_each_pools_utilisation(estate):
    record(
        estate, estate.team_a, estate.users["alice"], estate.onprem, DAY, DAY + timedelta(hours=12), gpus="4"
    )
    report = usage_report(estate.users["fin"], one_day("separate", "pool"), now=NOW)
    by_pool = {r["pool"]: r["utilisation"] for r in report.records()}
    assert by_pool == {"onprem": Decimal("25.0")}  # 48 of 8 x 24 GPU-hours


def test_leaderships_daily_utilisation_uses_the_capacity_in_force_each_day(estate):
    from apps.portal.usage import estate_history

    pools.update_pool(estate.onprem, capacity=Decimal("16"), now=DAY + timedelta(hours=12))
    pools.update_pool(estate.onprem, capacity=Decimal("2"), now=DAY + timedelta(days=30))  # since: no effect
    record(
        estate, estate.team_a, estate.users["alice"], estate.onprem, DAY, DAY + timedelta(hours=24), gpus="2"
    )
    history = estate_history(estate.users["fin"], days=2, now=DAY + timedelta(days=1, hours=12))
    assert history.days[0] == DAY
    assert round(history.owned_utilisation[0], 2) == Decimal("16.67")  # 48 of 8 x 12 + 16 x 12 GPU-hours


def test_the_report_page_says_the_utilisation_beside_the_spread_idle_share(client, estate):
    pools.update_pool(estate.cloud, enabled=False, now=DAY - timedelta(days=1))
    record(
        estate, estate.team_a, estate.users["alice"], estate.onprem, DAY, DAY + timedelta(hours=1), gpus="1"
    )
    client.force_login(estate.users["fin"])
    page = client.get("/reports/?period=day&date=2026-04-10&by=group&idle=spread").content.decode()
    sentence = " ".join(page.split("Unused capacity is not use.")[1].split("</p>")[0].split())
    assert "utilisation 0.5 %" in sentence
    assert "192 GPU-hours of capacity in force" in sentence and "and 1 of them were used" in sentence
    assert "€191.00 of unused capacity is spread over €1.00 of use: 99.5 % of the total cost" in sentence


def test_the_unused_capacity_counts_the_gpus_the_pools_live_daemons_really_had(estate):
    """onprem is declared at 8 GPUs; from 06:00 its one live daemon has 2: 8 x 6 + 2 x 18 GPU-hours."""
    pools.update_pool(estate.cloud, enabled=False, now=DAY - timedelta(days=1))
    token = EnrolmentToken(pool=estate.onprem, name="node")
    pools.issue_enrolment_token(token, now=DAY)
    protocol.enrol(token, hostname="node-a", gpus=Decimal(2), mode="process", now=DAY + timedelta(hours=6))
    report = usage_report(estate.users["fin"], one_day("separate"), now=NOW)
    assert report.capacity_hours == Decimal(8 * 6 + 2 * 18)
    assert report.unused.gpu_hours == Decimal(8 * 6 + 2 * 18)
