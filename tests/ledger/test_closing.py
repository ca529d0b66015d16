"""Closed months: frozen figures, adjustments booked in the next open month after a back-dated
price change or a late usage correction, reopening (audited), and reports reading it all."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from apps.ledger import closing
from apps.ledger.models import Adjustment, FrozenUsage, MonthClose, MonthCloseEvent
from apps.ledger.report_spec import ReportSpec
from apps.ledger.selectors import usage_report
from apps.pricing import services as pricing
from apps.pricing.models import Price
from tests.ledger.ledger_data import make_estate, record

pytestmark = pytest.mark.django_db

APRIL = (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC))
MAY = (datetime(2026, 5, 1, tzinfo=UTC), datetime(2026, 6, 1, tzinfo=UTC))
NOW = datetime(2026, 5, 10, 12, 0, tzinfo=UTC)


@pytest.fixture
def estate():
    estate = make_estate()
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour=Decimal("2.00"), effective_from=date(2026, 1, 1), via="system"
    )
    day = datetime(2026, 4, 10, tzinfo=UTC)
    u = estate.users
    # Pretraining: 2 GPUs x 10 h = 20 GPU-hours on A100 in project llm-7b; Alignment: 4 GPU-hours.
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
    record(estate, estate.team_b, u["bob"], estate.onprem, day, day + timedelta(hours=4), gpus="1")
    return estate


def report(viewer, *dims, period=APRIL, **options):
    spec = ReportSpec(dims=dims or ("group",), start=period[0], end=period[1], currency="EUR", **options)
    return usage_report(viewer, spec, now=NOW)


def cost_of(rep, name: str) -> Decimal:
    return next(r.figures.cost_amount for r in rep.rows if r.labels["group"] == name)


def test_a_closed_month_is_frozen_and_a_back_dated_price_change_is_an_adjustment_in_the_next_month(estate):
    fin = estate.users["fin"]
    close = closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    assert close.prices["EUR"][0]["per_gpu_hour"] in {"2.0000", None}
    assert FrozenUsage.objects.filter(close=close).count() == 2
    assert report(fin).total.cost_amount == Decimal("48.00")

    price = Price.objects.get(gpu_type=estate.a100)
    pricing.update_price(price, per_gpu_hour=Decimal("3.00"), actor=fin, via="portal")

    april = report(fin)
    assert april.total.cost_amount == Decimal("48.00"), "the closed month did not change"
    assert cost_of(april, "Pretraining") == Decimal("40.00")
    assert april.adjustments == []
    adjustments = list(Adjustment.objects.order_by("group__slug"))
    assert [(a.group.slug, a.closed_month, a.booked_in, a.cost, a.gpu_us) for a in adjustments] == [
        ("alignment", date(2026, 4, 1), date(2026, 5, 1), Decimal("4.00"), 0),
        ("pretraining", date(2026, 4, 1), date(2026, 5, 1), Decimal("20.00"), 0),
    ]
    assert adjustments[0].actor == fin and "A100-80GB" in adjustments[0].reason
    assert "2.0000 from 2026-01-01 → 3.0000 from 2026-01-01" in adjustments[0].reason

    may = report(fin, period=MAY)
    lines = {line["group"]: line for line in may.summary_records()}
    assert lines["Adjustments to closed months"]["cost"] == Decimal("24.00")
    assert lines["Total with adjustments"]["cost"] == lines["Total"]["cost"] + Decimal("24.00")


def test_a_second_change_books_only_the_new_difference_and_a_change_back_cancels_it(estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    price = Price.objects.get(gpu_type=estate.a100)
    pricing.update_price(price, per_gpu_hour=Decimal("3.00"), actor=fin, via="portal")
    pricing.update_price(price, per_gpu_hour=Decimal("2.00"), actor=fin, via="portal")
    total = sum(a.cost for a in Adjustment.objects.all())
    assert total == Decimal("0.00") and Adjustment.objects.count() == 4


def test_a_price_change_after_the_closed_month_books_nothing(estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    pricing.create_price(
        gpu_type=estate.a100, per_gpu_hour=Decimal("9"), effective_from=date(2026, 5, 2), via="system"
    )
    assert Adjustment.objects.count() == 0


def test_a_late_usage_correction_is_found_by_the_sweep_and_at_the_next_close(estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    day = datetime(2026, 4, 20, tzinfo=UTC)
    record(estate, estate.team_c, estate.users["carol"], estate.onprem, day, day + timedelta(hours=1))
    assert report(fin).total.gpu_hours == Decimal("24.000")
    made = closing.sweep(actor=fin, now=NOW)
    assert [(a.group.slug, a.gpu_us, a.cost) for a in made] == [
        ("perception", 3_600_000_000, Decimal("2.00"))
    ]
    assert made[0].reason == closing.LATE_CORRECTION
    assert closing.sweep(actor=fin, now=NOW) == []


def test_months_close_once_ended_and_once_only(estate):
    fin = estate.users["fin"]
    with pytest.raises(ValidationError, match="has not ended"):
        closing.close_month(date(2026, 5, 1), actor=fin, now=NOW)
    closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    with pytest.raises(ValidationError, match="already closed"):
        closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)


def test_reopening_is_audited_voids_the_adjustments_and_prices_on_read_again(estate):
    fin = estate.users["fin"]
    march = closing.close_month(date(2026, 3, 1), actor=fin, now=NOW)
    april = closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    price = Price.objects.get(gpu_type=estate.a100)
    pricing.update_price(price, per_gpu_hour=Decimal("3.00"), actor=fin, via="portal")
    with pytest.raises(ValidationError, match="Reopen April 2026 first"):
        closing.reopen_month(march, actor=fin, reason="typo", now=NOW)
    with pytest.raises(ValidationError, match="Say why"):
        closing.reopen_month(april, actor=fin, reason=" ", now=NOW)
    closing.reopen_month(april, actor=fin, reason="Price list was wrong", now=NOW)
    assert report(fin).total.cost_amount == Decimal("72.00")
    assert not Adjustment.objects.filter(voided_at__isnull=True).exists()
    assert report(fin, period=MAY).adjustments == []
    events = list(MonthCloseEvent.objects.filter(close=april).order_by("at", "pk"))
    assert [(e.action, e.actor, e.reason) for e in events] == [
        ("closed", fin, ""),
        ("reopened", fin, "Price list was wrong"),
    ]
    again = closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    assert MonthClose.objects.filter(month=date(2026, 4, 1)).count() == 2
    assert report(fin).total.cost_amount == Decimal("72.00") and again.reopened_at is None


def test_a_quarter_reads_the_closed_month_frozen_and_the_others_live(estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    may_day = datetime(2026, 5, 2, tzinfo=UTC)
    record(estate, estate.team_a, estate.users["alice"], estate.onprem, may_day, may_day + timedelta(hours=1))
    pricing.update_price(Price.objects.get(gpu_type=estate.a100), per_gpu_hour=Decimal("3.00"), via="system")
    quarter = report(fin, period=(APRIL[0], datetime(2026, 7, 1, tzinfo=UTC)))
    # April frozen at 2.00 (48), May live at 3.00 (3), and April's adjustment booked in May (24).
    assert quarter.total.cost_amount == Decimal("51.00")
    assert sum(a.cost for a in quarter.adjustments) == Decimal("24.00")


def test_a_team_lead_sees_the_frozen_figures_and_adjustments_of_their_team_only(estate):
    fin, lead = estate.users["fin"], estate.users["lead"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    pricing.update_price(Price.objects.get(gpu_type=estate.a100), per_gpu_hour=Decimal("3.00"), via="system")
    april = report(lead)
    assert {r.labels["group"] for r in april.rows} == {"Pretraining"}
    assert april.total.cost_amount == Decimal("40.00")
    assert [a.group.slug for a in report(lead, period=MAY).adjustments] == ["pretraining"]


def test_the_api_gives_the_adjustments_and_the_total_with_them(client, estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    pricing.update_price(Price.objects.get(gpu_type=estate.a100), per_gpu_hour=Decimal("3.00"), via="system")
    client.force_login(fin)
    data = client.get("/api/v1/usage/report/?by=group&period=month&date=2026-05-01").json()
    assert data["unused_capacity"] is None and data["capacity_in_force"] is None
    assert (
        data["adjustments"]["cost"] == "24.00"
        and data["adjustments"]["group"] == "Adjustments to closed months"
    )
    assert data["total_with_adjustments"]["group"] == "Total with adjustments"
    april = client.get("/api/v1/usage/report/?by=group&period=month&date=2026-04-01").json()
    assert april["rows"][0]["cost_centre"] == "" and april["adjustments"] is None
    spread = client.get("/api/v1/usage/report/?by=group&period=month&date=2026-05-01&idle=separate").json()
    assert spread["unused_capacity"]["group"] == "Unused capacity"
    assert spread["adjustments"]["cost"] == "24.00"


def test_moving_a_price_to_another_currency_books_the_closed_months_difference_in_the_one_it_left(estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    price = Price.objects.get(gpu_type=estate.a100)
    pricing.update_price(price, currency="USD", actor=fin, via="portal")
    made = list(Adjustment.objects.filter(currency="EUR").order_by("group__slug"))
    assert [(a.group.slug, a.cost) for a in made] == [
        ("alignment", Decimal("-8.00")),
        ("pretraining", Decimal("-40.00")),
    ]
    assert all(a.actor == fin and "price change" in a.reason for a in made)
    assert closing.sweep(actor=fin, now=NOW) == [], "booked once, at the change"


def test_the_unused_capacity_of_a_closed_month_is_read_from_its_frozen_use(estate):
    fin = estate.users["fin"]
    closing.close_month(date(2026, 4, 1), actor=fin, now=NOW)
    before = report(fin, idle="separate")
    day = datetime(2026, 4, 20, tzinfo=UTC)
    record(estate, estate.team_c, estate.users["carol"], estate.onprem, day, day + timedelta(hours=100))
    after = report(fin, idle="separate")
    assert after.unused.gpu_us == before.unused.gpu_us > 0
    assert after.unused.cost_amount == before.unused.cost_amount
    assert after.utilisation == before.utilisation
