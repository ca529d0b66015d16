"""An agent's usage shows on its own lines, "<owner> via agent <name>", in the usage report, its
CSV and XLSX exports and the API report, read from the intervals, the rollups and a closed month;
its owner's row and the group's still count it."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from apps.ledger import closing, exports, rollups
from apps.ledger.models import UsageInterval
from apps.ledger.report_spec import ReportSpec
from apps.ledger.selectors import usage_report
from apps.pricing import services as pricing
from apps.tasks.models import Task
from tests.agents.conftest import client_for

pytestmark = pytest.mark.django_db

DAY = datetime(2026, 4, 10, tzinfo=UTC)
APRIL = (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))


def interval(estate, hours, gpus, agent=None):
    resource = estate.resource
    task = Task.objects.create(
        user=estate.owner, agent=agent, compute_resource=resource, gpus=Decimal(gpus), command="x"
    )
    return UsageInterval.objects.create(
        task=task,
        user=estate.owner,
        agent=agent,
        policy=resource.policy,
        group=resource.policy.group,
        compute_resource=resource,
        pool=estate.pool,
        gpu_type=estate.pool.gpu_type,
        gpus=Decimal(gpus),
        time_weight=Decimal("1"),
        start=DAY,
        end=DAY + timedelta(hours=hours),
    )


@pytest.fixture
def usage(estate):
    interval(estate, 3, "1")
    interval(estate, 2, "2", agent=estate.agent)
    pricing.create_price(
        gpu_type=estate.pool.gpu_type, per_gpu_hour=Decimal("2"), effective_from=date(2026, 1, 1), via="api"
    )
    return estate


def by_label(report, *dims):
    return {
        tuple(r.labels[d] for d in dims): (r.figures.gpu_hours, r.figures.cost_amount) for r in report.rows
    }


def spec(*dims):
    return ReportSpec(dims=dims, start=APRIL[0], end=APRIL[1], currency="EUR")


@pytest.mark.parametrize("rolled", [False, True], ids=["intervals", "rollups"])
def test_a_cut_by_user_gives_the_agent_its_own_line_under_its_owner(usage, rolled):
    if rolled:
        rollups.refresh(now=datetime(2026, 5, 2, tzinfo=UTC))
    report = usage_report(usage.it, spec("user"), now=datetime(2026, 5, 2, tzinfo=UTC))
    assert by_label(report, "user") == {
        ("vera",): (Decimal("7.000"), Decimal("14.00")),  # her own 3 GPU-hours and her agent's 4
        ("vera via agent eval-bot",): (Decimal("4.000"), Decimal("8.00")),
    }
    assert report.total.gpu_hours == Decimal("7.000")
    assert [r.labels["user"] for r in report.rows] == ["vera", "vera via agent eval-bot"]
    by_group = usage_report(usage.it, spec("group", "user"), now=datetime(2026, 5, 2, tzinfo=UTC))
    assert by_label(by_group, "group", "user")[("Vision", "vera via agent eval-bot")][0] == Decimal("4.000")
    assert by_label(usage_report(usage.it, spec("group")), "group")[("Vision",)][0] == Decimal("7.000")


def test_the_exports_and_the_api_report_carry_the_agent_line(usage):
    report = usage_report(usage.it, spec("user"), now=datetime(2026, 5, 2, tzinfo=UTC))
    lines = exports.table(report)
    assert any(line[0] == "vera via agent eval-bot" for line in lines)
    assert exports.xlsx_response(report).status_code == 200
    answer = client_for(usage.it).get(
        "/api/v1/usage/report/", {"by": "user", "period": "month", "date": "2026-04-10", "currency": "EUR"}
    )
    assert answer.status_code == 200, answer.json()
    assert "vera via agent eval-bot" in [row["user"] for row in answer.json()["rows"]]


def test_a_closed_month_keeps_the_agent_line(usage):
    closing.close_month(date(2026, 4, 1), now=datetime(2026, 5, 2, tzinfo=UTC))
    report = usage_report(usage.it, spec("user"), now=datetime(2026, 5, 3, tzinfo=UTC))
    assert by_label(report, "user")[("vera via agent eval-bot",)] == (Decimal("4.000"), Decimal("8.00"))


def test_the_owner_sees_their_agents_line_and_a_stranger_sees_none(usage):
    mine = usage_report(usage.owner, spec("user"), now=datetime(2026, 5, 2, tzinfo=UTC))
    assert ("vera via agent eval-bot",) in by_label(mine, "user")
    theirs = usage_report(usage.stranger, spec("user"), now=datetime(2026, 5, 2, tzinfo=UTC))
    assert theirs.rows == []
