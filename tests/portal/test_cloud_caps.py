"""Leadership's cloud spend caps in the portal: leadership sets and removes them on the leadership page,
which shows each cap's scope, amount, spend this month, share, status and reset time; bad input is a
400 naming the field and why; no one else may change a cap (403, the RBAC matrix has the rows)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.accounts.models import Group
from apps.cloud.caps import month_bounds
from apps.cloud.models import CloudNode, CloudPool, CloudSpendCap, CloudSpendCapChange

pytestmark = pytest.mark.django_db

SET = "/leadership/cloud-caps/"


def group(slug: str) -> Group:
    return Group.objects.get(slug=slug)


def test_leadership_sets_a_cap_and_the_page_shows_it_within_the_cap(login):
    client = login("cio")
    response = client.post(SET, {"group": group("acme").pk, "amount": "25000", "currency": "eur"})
    assert response.status_code == 302 and response["Location"] == "/leadership/"
    cap = CloudSpendCap.objects.get()
    assert (cap.group.slug, cap.amount, cap.currency, cap.set_by.username) == ("acme", 25000, "EUR", "cio")
    change = CloudSpendCapChange.objects.get()
    assert (change.action, change.via, change.actor.username) == ("set", "portal", "cio")
    page = client.get("/leadership/").content.decode()
    assert "Cloud spend cap of Acme Labs: €25,000.00 a month." in page
    _, resets = month_bounds(timezone.now())
    for shown in (
        "organisation",
        "Acme Labs",
        "€25,000.00",
        "€0.00",
        "within cap",
        f"{resets:%Y-%m-%d} 00:00 UTC",
    ):
        assert shown in page
    assert "Set a cloud spend cap" in page and "Remove" in page


def test_setting_a_scopes_cap_again_changes_its_amount(login):
    client = login("cio")
    research = group("research").pk
    client.post(SET, {"group": research, "amount": "1000", "currency": "EUR"})
    client.post(SET, {"group": research, "amount": "1500.25", "currency": "EUR"})
    assert CloudSpendCap.objects.get().amount == Decimal("1500.25")
    assert list(CloudSpendCapChange.objects.order_by("pk").values_list("action", flat=True)) == [
        "set",
        "changed",
    ]


def test_leadership_removes_a_cap(login):
    client = login("cio")
    client.post(SET, {"group": group("products").pk, "amount": "500", "currency": "EUR"})
    cap = CloudSpendCap.objects.get()
    response = client.post(f"/leadership/cloud-caps/{cap.pk}/remove/")
    assert response.status_code == 302
    assert not CloudSpendCap.objects.exists()
    removed = CloudSpendCapChange.objects.get(action="removed")
    assert (removed.actor.username, removed.via, removed.before["amount"]) == ("cio", "portal", "500.0000")
    assert client.post(f"/leadership/cloud-caps/{cap.pk}/remove/").status_code == 404


def test_a_reached_cap_shows_cap_reached_with_its_reset_time(login):
    """The demo prices its cloud instance type at 9.50 EUR a spot node-hour; a node alive for the
    last hour (this month) has cost more than a cap of 0.0001 EUR."""
    now = timezone.now()
    start, resets = month_bounds(now)
    cloud_pool = CloudPool.objects.get(pool__name="cloud-h100")
    CloudNode.objects.create(
        cloud_pool=cloud_pool,
        instance_type=cloud_pool.instance_types.get(),
        market=CloudNode.Market.SPOT,
        name="cloud-h100-capped",
        state=CloudNode.State.READY,
        launched_at=max(start, now - timedelta(hours=1)),
    )
    client = login("cio")
    client.post(SET, {"group": group("acme").pk, "amount": "0.0001", "currency": "EUR"})
    page = client.get("/leadership/").content.decode()
    assert f"cap reached until {resets:%Y-%m-%d} 00:00 UTC" in page
    csv = client.get("/leadership/?export=csv&table=caps").content.decode()
    assert f"cap reached until {resets:%Y-%m-%d} 00:00 UTC" in csv and "Remove" not in csv


@pytest.mark.parametrize(
    ("data", "shown"),
    [
        ({"amount": "0"}, "Monthly amount: The monthly amount must be more than 0."),
        ({"amount": "-3"}, "Monthly amount: The monthly amount must be more than 0."),
        ({"amount": "1e3"}, "Monthly amount: Enter a number. Plain decimal notation only"),
        ({"amount": "1.00001"}, "Monthly amount: Ensure that there are no more than 4 decimal places."),
        ({"amount": ""}, "Monthly amount: This field is required."),
        ({"currency": "EU"}, "Currency: Currency must be a three-letter ISO 4217 code, such as EUR."),
        ({"currency": "1234"}, "Currency: Ensure this value has at most 3 characters"),
        ({"group": "pretraining"}, "Scope: Select a valid choice."),
        ({"group": "999999"}, "Scope: Select a valid choice."),
        ({"group": "x"}, "Scope: Select a valid choice."),
    ],
)
def test_bad_input_is_a_400_that_names_the_field_and_why(login, data, shown):
    client = login("cio")
    body = {"group": group("acme").pk, "amount": "100", "currency": "EUR"}
    if data.get("group") == "pretraining":
        data = {"group": group("pretraining").pk}
    response = client.post(SET, body | data)
    assert response.status_code == 400
    assert shown in response.content.decode()
    assert not CloudSpendCap.objects.exists()


@pytest.mark.parametrize("role", ["it", "finance", "head-language", "lead-pretraining", "dev-pretraining"])
def test_no_one_but_leadership_changes_a_cap(login, role):
    cap_client = login("cio")
    cap_client.post(SET, {"group": group("acme").pk, "amount": "100", "currency": "EUR"})
    cap = CloudSpendCap.objects.get()
    client = login(role)
    assert client.post(SET, {"group": group("acme").pk, "amount": "1", "currency": "EUR"}).status_code == 403
    assert client.post(f"/leadership/cloud-caps/{cap.pk}/remove/").status_code == 403
    cap.refresh_from_db()
    assert cap.amount == 100 and CloudSpendCapChange.objects.count() == 1


def test_it_sees_the_caps_but_no_form_to_change_them(login):
    login("cio").post(SET, {"group": group("acme").pk, "amount": "100", "currency": "EUR"})
    page = login("it").get("/leadership/").content.decode()
    assert "Acme Labs" in page and "€100.00" in page
    assert "Set a cloud spend cap" not in page and "/remove/" not in page


def test_a_get_on_the_form_url_is_refused_not_a_500(login):
    assert login("cio").get(SET).status_code == 405
