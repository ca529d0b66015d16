"""Cloud node prices: per instance type and market, effective-dated like GPU prices, audited in the
same trail through every channel, and changed only by finance and IT."""

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from apps.pricing import services
from apps.pricing.models import NodePrice, PriceChange
from apps.pricing.selectors import node_price_segments
from tests.ledger.ledger_data import make_estate

pytestmark = pytest.mark.django_db

TYPE = "p5.48xlarge"


@pytest.fixture
def estate():
    return make_estate()


def node_price(amount="30", market="spot", day=date(2026, 1, 1), currency="EUR", actor=None, via="system"):
    return services.create_node_price(
        instance_type=TYPE,
        market=market,
        per_node_hour=amount,
        effective_from=day,
        currency=currency,
        actor=actor,
        via=via,
    )


def test_a_node_price_applies_from_midnight_utc_until_the_next_of_its_type_market_and_currency():
    node_price("10", day=date(2026, 4, 1))
    node_price("12", day=date(2026, 4, 15))
    node_price("30", market="on-demand", day=date(2026, 4, 10))
    node_price("11", day=date(2026, 4, 10), currency="USD")
    start, end = datetime(2026, 3, 30, tzinfo=UTC), datetime(2026, 5, 1, tzinfo=UTC)
    segments = node_price_segments("EUR", start, end)
    assert set(segments) == {(TYPE, "spot"), (TYPE, "on-demand")}
    assert [(s.start, s.end, s.per_node_hour) for s in segments[(TYPE, "spot")]] == [
        (start, datetime(2026, 4, 1, tzinfo=UTC), None),
        (datetime(2026, 4, 1, tzinfo=UTC), datetime(2026, 4, 15, tzinfo=UTC), Decimal("10")),
        (datetime(2026, 4, 15, tzinfo=UTC), end, Decimal("12")),
    ]
    assert [(s.start, s.per_node_hour) for s in segments[(TYPE, "on-demand")]] == [
        (start, None),
        (datetime(2026, 4, 10, tzinfo=UTC), Decimal("30")),
    ]


def test_node_price_changes_join_the_one_price_audit_trail(estate):
    fin = estate.users["fin"]
    services.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 1, 1), via="system"
    )
    price = node_price("30.5", actor=fin, via="portal")
    services.update_node_price(price, per_node_hour=Decimal("31"), actor=fin, via="portal")
    services.update_node_price(price, per_node_hour=Decimal("31.00"), actor=fin, via="portal")  # no change
    services.delete_node_price(price, actor=fin, via="portal")
    changes = list(PriceChange.objects.filter(gpu_type=None).order_by("pk"))
    assert [(c.action, c.instance_type, c.market, c.currency) for c in changes] == [
        ("created", TYPE, "spot", "EUR"),
        ("changed", TYPE, "spot", "EUR"),
        ("deleted", TYPE, "spot", "EUR"),
    ]
    assert changes[1].before["per_node_hour"] == "30.5000" and changes[1].after["per_node_hour"] == "31.0000"
    assert changes[2].after == {} and changes[2].node_price is None
    assert str(changes[0]).startswith("Created p5.48xlarge (Spot) EUR price")
    assert PriceChange.objects.count() == 4


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"currency": "EURO"}, "currency"),
        ({"market": "reserved"}, "market"),
        ({"per_node_hour": "-1"}, "per_node_hour"),
        ({"per_node_hour": "1.00001"}, "per_node_hour"),
        ({"instance_type": ""}, "instance_type"),
        ({"instance_type": "   "}, "instance_type"),
        ({"currency": "ÉUR"}, "currency"),
        ({"currency": "E1R"}, "currency"),
    ],
)
def test_bad_node_prices_are_refused_naming_the_field(fields, field):
    values = {
        "instance_type": TYPE,
        "market": "spot",
        "per_node_hour": "2",
        "effective_from": date(2026, 1, 1),
        **fields,
    }
    with pytest.raises(ValidationError) as refused:
        services.create_node_price(**values, via="system")
    assert field in refused.value.message_dict
    assert not PriceChange.objects.exists()


def test_two_node_prices_for_one_type_market_currency_and_day_are_refused_but_another_market_is_not():
    node_price("30")
    node_price("90", market="on-demand")
    with pytest.raises(ValidationError):
        node_price("31")
    assert NodePrice.objects.count() == 2


def test_finance_adds_changes_and_deletes_a_node_price_in_the_portal_and_each_step_is_audited(client, estate):
    fin = estate.users["fin"]
    client.force_login(fin)
    form = {
        "instance_type": TYPE,
        "market": "on-demand",
        "currency": "eur",
        "per_node_hour": "98.32",
        "effective_from": "2026-04-01",
    }
    assert client.post("/prices/nodes/new/", form).status_code == 302
    price = NodePrice.objects.get()
    assert price.currency == "EUR" and price.per_node_hour == Decimal("98.32")
    edited = client.post(f"/prices/nodes/{price.pk}/edit/", {**form, "per_node_hour": "90"})
    assert edited.status_code == 302
    assert client.get(f"/prices/nodes/{price.pk}/delete/").status_code == 200
    assert client.post(f"/prices/nodes/{price.pk}/delete/").status_code == 302
    assert [(c.action, c.via, c.actor) for c in PriceChange.objects.order_by("pk")] == [
        ("created", "portal", fin),
        ("changed", "portal", fin),
        ("deleted", "portal", fin),
    ]
    trail = client.get("/prices/changes/").content.decode()
    assert TYPE in trail and "€90.00 from 2026-04-01" in trail


def test_the_price_list_shows_node_prices_and_edit_links_only_to_finance_and_it(client, estate):
    node_price("30.25")
    client.force_login(estate.users["alice"])
    page = client.get("/prices/").content.decode()
    assert (
        "30.25<" in page
        and "30.2500" not in page
        and "Add a node price" not in page
        and "/prices/nodes/" not in page
    )
    client.force_login(estate.users["it"])
    page = client.get("/prices/?n-market=spot").content.decode()
    assert "Add a node price" in page and "/prices/nodes/" in page
    assert client.get("/prices/?n-market=reserved").status_code == 400


def test_a_bad_node_price_in_the_portal_is_a_400_naming_the_field(client, estate):
    client.force_login(estate.users["it"])
    form = {
        "instance_type": TYPE,
        "market": "spot",
        "currency": "EUR",
        "per_node_hour": "1e1",
        "effective_from": "2026-04-01",
    }
    response = client.post("/prices/nodes/new/", form)
    assert response.status_code == 400 and "per_node_hour" in response.context["form"].errors
    assert not NodePrice.objects.exists() and not PriceChange.objects.exists()


@pytest.mark.parametrize("name", ["alice", "lead", "head", "cio"])
def test_only_finance_and_it_change_node_prices(client, estate, name):
    price = node_price()
    client.force_login(estate.users[name])
    form = {
        "instance_type": TYPE,
        "market": "spot",
        "currency": "EUR",
        "per_node_hour": "1",
        "effective_from": "2026-04-01",
    }
    assert client.get("/prices/nodes/new/").status_code == 403
    assert client.post("/prices/nodes/new/", form).status_code == 403
    assert client.post(f"/prices/nodes/{price.pk}/edit/", form).status_code == 403
    assert client.post(f"/prices/nodes/{price.pk}/delete/").status_code == 403
    assert PriceChange.objects.count() == 1


def test_a_node_price_saved_in_the_admin_is_audited(client, estate):
    it = estate.users["it"]
    client.force_login(it)
    form = {
        "instance_type": TYPE,
        "market": "spot",
        "currency": "EUR",
        "per_node_hour": "30",
        "effective_from": "2026-02-01",
    }
    assert client.post("/admin/pricing/nodeprice/add/", form).status_code == 302
    price = NodePrice.objects.get()
    changed = client.post(f"/admin/pricing/nodeprice/{price.pk}/change/", {**form, "per_node_hour": "32"})
    assert changed.status_code == 302
    assert client.post(f"/admin/pricing/nodeprice/{price.pk}/delete/", {"post": "yes"}).status_code == 302
    assert [(c.action, c.via, c.actor) for c in PriceChange.objects.order_by("pk")] == [
        ("created", "admin", it),
        ("changed", "admin", it),
        ("deleted", "admin", it),
    ]
    assert client.get("/admin/pricing/pricechange/").status_code == 200


def test_the_api_lists_node_prices_for_external_billing(client, estate):
    node_price("30")
    node_price("90", market="on-demand")
    assert client.get("/api/v1/usage/prices/nodes/").status_code == 401
    client.force_login(estate.users["alice"])
    data = client.get("/api/v1/usage/prices/nodes/?market=on-demand").json()
    assert [(p["instance_type"], p["market"], p["per_node_hour"]) for p in data["results"]] == [
        (TYPE, "on-demand", "90.0000")
    ]
    assert client.get("/api/v1/usage/prices/nodes/?market=reserved").status_code == 400


def test_a_node_price_in_a_non_ascii_currency_is_refused_in_the_portal_naming_the_currency(client, estate):
    """ "ÉUR" is three letters to ``str.isalpha`` but no ISO 4217 code: refused like a cloud spend
    cap's currency, by the one check both use."""
    client.force_login(estate.users["fin"])
    form = {
        "instance_type": TYPE,
        "market": "spot",
        "currency": "ÉUR",
        "per_node_hour": "1",
        "effective_from": "2026-05-01",
    }
    response = client.post("/prices/nodes/new/", form)
    assert response.status_code == 400 and "ISO 4217" in response.context["form"].errors["currency"][0]
    assert not NodePrice.objects.exists()


def test_the_gpu_price_node_price_and_cap_currencies_are_checked_alike(estate):
    from apps.cloud.models import CloudSpendCap
    from apps.core.currency import currency_error
    from apps.pricing.models import Price

    for value, refused in (("ÉUR", True), ("EU", True), ("usd", False)):
        assert (currency_error(value) is not None) == refused
        for model in (
            Price(gpu_type=estate.a100, currency=value, per_gpu_hour=1, effective_from=date(2026, 1, 1)),
            NodePrice(
                instance_type=TYPE,
                market="spot",
                currency=value,
                per_node_hour=1,
                effective_from=date(2026, 1, 1),
            ),
            CloudSpendCap(
                group=estate.org, amount=1, currency=value, updated_at=datetime(2026, 1, 1, tzinfo=UTC)
            ),
        ):
            if refused:
                with pytest.raises(ValidationError) as error:
                    model.full_clean()
                assert "currency" in error.value.message_dict
            else:
                model.full_clean(validate_unique=False)
                assert model.currency == "USD"


def test_currencies_include_those_only_node_prices_use_after_the_gpu_prices_ones(estate):
    from apps.pricing.selectors import currencies

    assert currencies() == ["EUR"]  # the default, no price at all
    node_price("10", currency="USD")
    assert currencies() == ["USD"]
    services.create_price(
        gpu_type=estate.a100, per_gpu_hour="2", effective_from=date(2026, 1, 1), via="system"
    )
    assert currencies() == ["EUR", "USD"]
