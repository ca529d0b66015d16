"""Issue 37 part 4: a policy's ``credit_lost_work`` credits the GPU-hours its preempted work lost
back on the statement ("credit for lost work", at the GPU type's price at the preemption); each
preemption once, never more than the total, and nothing for policies that do not set it."""

import csv
import io
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from apps.ledger import statements
from apps.pricing import services as pricing
from apps.tasks.models import TaskEvent
from tests.ledger.ledger_data import make_estate, record
from tests.ledger.test_statements import pdf_text

pytestmark = pytest.mark.django_db

DAY = datetime(2026, 4, 10, tzinfo=UTC)
H = timedelta(hours=1)


@pytest.fixture
def estate():
    estate = make_estate()
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour=Decimal("2.00"), effective_from=date(2026, 1, 1), via="system"
    )
    return estate


def preempted_run(estate, group, user, start, end, gpus, lost):
    interval = record(estate, group, user, estate.onprem, start, end, gpus=gpus)
    TaskEvent.objects.create(
        task=interval.task, at=end, kind="preempted", reason="reclaim", lost_gpu_hours=lost
    )
    return interval


def credit_on(*groups):
    for group in groups:
        group.policy.credit_lost_work = True
        group.policy.save()


def made(estate, group):
    spec = statements.statement_spec(group, date(2026, 4, 1), "EUR")
    return statements.statement(estate.users["fin"], spec, now=datetime(2026, 5, 2, tzinfo=UTC))


def test_credit_lost_work_is_the_lost_gpu_hours_at_the_price_once_per_preemption(estate):
    # Pretraining (crediting): 2 GPUs x 10 h = 20 GPU-hours (40.00), preempted losing 1.5 GPU-hours;
    # its next run of the same task (1 GPU-hour, 2.00) starts at the preemption's instant and does
    # not credit it again. Alignment (not crediting): 4 GPU-hours (8.00), preempted losing 2.
    # Total 50.00; credit 1.5 x 2.00 = 3.00; after it 47.00.
    credit_on(estate.team_a)
    run = preempted_run(estate, estate.team_a, estate.users["alice"], DAY, DAY + 10 * H, "2", Decimal("1.5"))
    record(
        estate, estate.team_a, estate.users["alice"], estate.onprem, DAY + 10 * H, DAY + 11 * H, task=run.task
    )
    preempted_run(estate, estate.team_b, estate.users["bob"], DAY, DAY + 4 * H, "1", Decimal("2"))
    found = made(estate, estate.dept)
    assert found.report.total.cost_amount == Decimal("50.00")
    assert (found.lost_credit.gpu_hours, found.lost_credit.amount) == (Decimal("1.5"), Decimal("3.00"))
    assert found.total_after_credit == Decimal("47.00")
    rows = list(csv.reader(io.StringIO(statements.csv_text(found))))
    assert rows[-2][0] == "Credit for lost work" and rows[-1][1:] == ["1.500000", "0", "-3.00", "47.00"]
    text = pdf_text(statements.pdf_bytes(found))
    assert "Credit for lost work" in text and "47.00" in text


def test_credit_lost_work_never_makes_the_total_negative_and_is_absent_when_off(estate):
    preempted_run(estate, estate.team_a, estate.users["alice"], DAY, DAY + H, "1", Decimal("5"))
    assert made(estate, estate.team_a).lost_credit is None
    credit_on(estate.team_a)
    found = made(estate, estate.team_a)
    assert (found.lost_credit.amount, found.total_after_credit) == (Decimal("2.00"), Decimal("0.00"))


def test_credit_lost_work_of_a_member_is_their_own_and_a_lost_workers_run_is_credited(estate):
    # Pretraining credits. Alice ran 10 GPU-hours (20.00) and lost nothing; the lead's run lost 3
    # GPU-hours when its worker was lost: its interval ended at the last heartbeat (1 h before the
    # preemption event), and it is still the run that preemption ended.
    credit_on(estate.team_a)
    record(estate, estate.team_a, estate.users["alice"], estate.onprem, DAY, DAY + 5 * H, gpus="2")
    lost = record(estate, estate.team_a, estate.users["lead"], estate.onprem, DAY, DAY + 4 * H, gpus="1")
    TaskEvent.objects.create(
        task=lost.task, at=DAY + 5 * H, kind="preempted", reason="worker_lost", lost_gpu_hours=Decimal("3")
    )
    whole = made(estate, estate.team_a)
    assert whole.report.total.cost_amount == Decimal("28.00")
    assert (whole.lost_credit.gpu_hours, whole.lost_credit.amount) == (Decimal("3"), Decimal("6.00"))
    spec = statements.statement_spec(estate.team_a, date(2026, 4, 1), "EUR")
    own = statements.statement(estate.users["alice"], spec, now=datetime(2026, 5, 2, tzinfo=UTC))
    assert own.report.total.cost_amount == Decimal("20.00")
    assert (own.lost_credit.gpu_hours, own.lost_credit.amount) == (Decimal("0"), Decimal("0.00"))
