"""Prices: effective-dated segments, audited changes through every channel, and who may change them."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from apps.pricing import services
from apps.pricing.models import Price, PriceChange
from apps.pricing.selectors import currencies, price_segments
from tests.factories import UserFactory
from tests.ledger.ledger_data import make_estate

pytestmark = pytest.mark.django_db


@pytest.fixture
def estate():
    return make_estate()


def test_a_price_applies_from_midnight_utc_of_its_day_until_the_next_one(estate):
    services.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 4, 1), via="system"
    )
    services.create_price(
        gpu_type=estate.a100, per_gpu_hour="3", effective_from=date(2026, 4, 15), via="system"
    )
    start, end = datetime(2026, 3, 30, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC)
    a100 = [
        (s.start, s.end, s.per_gpu_hour)
        for s in price_segments("EUR", start, end)
        if s.gpu_type_id == estate.a100.pk
    ]
    assert a100 == [
        (start, datetime(2026, 4, 1, tzinfo=UTC), None),
        (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 4, 15, tzinfo=UTC), Decimal("2")),
        (datetime(2026, 4, 15, tzinfo=UTC), end, Decimal("3")),
    ]
    h100 = [s for s in price_segments("EUR", start, end) if s.gpu_type_id == estate.h100.pk]
    assert [(s.start, s.end, s.per_gpu_hour) for s in h100] == [(start, end, None)]


def test_every_change_is_audited_with_who_when_how_before_and_after(estate):
    fin = estate.users["fin"]
    price = services.create_price(
        gpu_type=estate.a100, per_gpu_hour="2.1", effective_from=date(2026, 1, 1), actor=fin, via="portal"
    )
    services.update_price(price, per_gpu_hour=Decimal("2.3"), actor=fin, via="portal")
    services.update_price(
        price, per_gpu_hour=Decimal("2.30"), actor=fin, via="portal"
    )  # no change: no record
    services.delete_price(price, actor=fin, via="portal")
    changes = list(PriceChange.objects.order_by("pk"))
    assert [c.action for c in changes] == ["created", "changed", "deleted"]
    assert changes[1].before["per_gpu_hour"] == "2.1000" and changes[1].after["per_gpu_hour"] == "2.3000"
    assert (
        changes[2].before["gpu_type"] == "A100-80GB" and changes[2].after == {} and changes[2].price is None
    )
    assert all(c.actor == fin and c.via == "portal" and c.at for c in changes)
    assert not Price.objects.exists()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"currency": "EURO"}, "currency"),
        ({"currency": "E1R"}, "currency"),
        ({"per_gpu_hour": "-1"}, "per_gpu_hour"),
        ({"per_gpu_hour": "1.00001"}, "per_gpu_hour"),
    ],
)
def test_bad_prices_are_refused_naming_the_field(estate, fields, field):
    values = {"gpu_type": estate.a100, "per_gpu_hour": "2", "effective_from": date(2026, 1, 1), **fields}
    with pytest.raises(ValidationError) as refused:
        services.create_price(**values, via="system")
    assert field in refused.value.message_dict
    assert not PriceChange.objects.exists()


def test_two_prices_for_one_gpu_type_currency_and_day_are_refused(estate):
    services.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 1, 1), via="system"
    )
    with pytest.raises(ValidationError):
        services.create_price(
            gpu_type=estate.a100, per_gpu_hour="3", effective_from=date(2026, 1, 1), via="system"
        )


def test_currencies_are_those_with_prices_most_used_first(estate):
    assert currencies() == ["EUR"]
    services.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 1, 1), currency="usd", via="system"
    )
    assert currencies() == ["USD"]


def test_everyone_signed_in_reads_the_price_list_but_only_finance_and_it_see_edit_links(client, estate):
    services.create_price(
        gpu_type=estate.a100, per_gpu_hour="2.1", effective_from=date(2026, 1, 1), via="system"
    )
    assert client.get("/prices/").status_code == 302
    client.force_login(estate.users["alice"])
    page = client.get("/prices/").content.decode()
    assert "€2.10<" in page and "2.1000" not in page and "Add a price" not in page and "/edit/" not in page
    client.force_login(estate.users["fin"])
    page = client.get("/prices/?gpu_type=A100-80GB").content.decode()
    assert "Add a price" in page and "/edit/" in page


@pytest.mark.parametrize("loose", ["2_5", "\uff12.\uff15", "1e1"])
def test_a_price_in_loose_notation_is_refused_on_the_field(client, estate, loose):
    client.force_login(estate.users["fin"])
    form = {"gpu_type": estate.h100.pk, "currency": "EUR", "effective_from": "2026-04-01"}
    response = client.post("/prices/new/", {**form, "per_gpu_hour": loose})
    assert response.status_code in (200, 400)
    assert "Enter a number." in response.content.decode()
    assert not Price.objects.exists()


def test_finance_adds_changes_and_deletes_a_price_in_the_portal_and_each_step_is_audited(client, estate):
    fin = estate.users["fin"]
    client.force_login(fin)
    form = {
        "gpu_type": estate.h100.pk,
        "currency": "eur",
        "per_gpu_hour": "3.40",
        "effective_from": "2026-04-01",
    }
    assert client.post("/prices/new/", form).status_code == 302
    price = Price.objects.get()
    assert price.currency == "EUR" and price.per_gpu_hour == Decimal("3.4")
    assert client.post(f"/prices/{price.pk}/edit/", {**form, "per_gpu_hour": "3.60"}).status_code == 302
    assert client.get(f"/prices/{price.pk}/delete/").status_code == 200
    assert client.post(f"/prices/{price.pk}/delete/").status_code == 302
    changes = PriceChange.objects.order_by("pk")
    assert [(c.action, c.via, c.actor) for c in changes] == [("created", "portal", fin)] + [
        ("changed", "portal", fin),
        ("deleted", "portal", fin),
    ]
    assert client.get("/prices/changes/").status_code == 200


def test_a_bad_price_in_the_portal_is_a_400_naming_the_field(client, estate):
    client.force_login(estate.users["it"])
    form = {
        "gpu_type": estate.h100.pk,
        "currency": "EUR",
        "per_gpu_hour": "-2",
        "effective_from": "2026-04-01",
    }
    response = client.post("/prices/new/", form)
    assert response.status_code == 400 and "per_gpu_hour" in response.context["form"].errors
    assert not Price.objects.exists() and not PriceChange.objects.exists()


@pytest.mark.parametrize("name", ["alice", "lead", "head", "cio"])
def test_only_finance_and_it_change_prices(client, estate, name):
    price = services.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 1, 1), via="system"
    )
    client.force_login(estate.users[name])
    form = {
        "gpu_type": estate.h100.pk,
        "currency": "EUR",
        "per_gpu_hour": "1",
        "effective_from": "2026-04-01",
    }
    assert client.get("/prices/new/").status_code == 403
    assert client.post("/prices/new/", form).status_code == 403
    assert client.post(f"/prices/{price.pk}/edit/", form).status_code == 403
    assert client.post(f"/prices/{price.pk}/delete/").status_code == 403
    assert PriceChange.objects.count() == 1


@pytest.mark.parametrize(
    ("name", "status"), [("alice", 403), ("head", 403), ("cio", 200), ("fin", 200), ("it", 200)]
)
def test_the_audit_trail_is_for_it_leadership_and_finance(client, estate, name, status):
    client.force_login(estate.users[name])
    assert client.get("/prices/changes/").status_code == status


def test_a_price_saved_in_the_admin_is_audited(client, estate):
    it = estate.users["it"]
    client.force_login(it)
    form = {
        "gpu_type": estate.a100.pk,
        "currency": "EUR",
        "per_gpu_hour": "2.5",
        "effective_from": "2026-02-01",
    }
    assert client.post("/admin/pricing/price/add/", form).status_code == 302
    price = Price.objects.get()
    assert (
        client.post(f"/admin/pricing/price/{price.pk}/change/", {**form, "per_gpu_hour": "2.75"}).status_code
        == 302
    )
    assert client.post(f"/admin/pricing/price/{price.pk}/delete/", {"post": "yes"}).status_code == 302
    assert [(c.action, c.via, c.actor) for c in PriceChange.objects.order_by("pk")] == [
        ("created", "admin", it),
        ("changed", "admin", it),
        ("deleted", "admin", it),
    ]


def test_staff_without_the_finance_or_it_role_cannot_change_prices_in_the_admin(client, estate):
    staff = UserFactory(username="auditor", is_staff=True, is_superuser=False)
    from django.contrib.auth.models import Permission

    staff.user_permissions.set(Permission.objects.filter(content_type__app_label="pricing"))
    client.force_login(staff)
    assert client.get("/admin/pricing/price/add/").status_code == 403


def test_the_api_lists_prices_for_external_billing(client, estate):
    services.create_price(
        gpu_type=estate.a100, per_gpu_hour="2.1", effective_from=date(2026, 1, 1), via="system"
    )
    services.create_price(
        gpu_type=estate.h100, per_gpu_hour="3.4", effective_from=date(2026, 1, 1), via="system"
    )
    assert client.get("/api/v1/usage/prices/").status_code == 401
    client.force_login(estate.users["alice"])
    data = client.get("/api/v1/usage/prices/?gpu_type=H100").json()
    assert [(p["gpu_type"], p["per_gpu_hour"], p["effective_from"]) for p in data["results"]] == [
        ("H100", "3.4000", "2026-01-01")
    ]
