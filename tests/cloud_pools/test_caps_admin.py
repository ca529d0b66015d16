"""Cloud spend caps in the admin: IT adds, changes and deletes them through the services, so each is
audited with via "admin"; the audit trail is read-only; a wrong scope or amount shows on the form."""

from decimal import Decimal

import pytest
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Group, Membership
from apps.cloud.models import CloudSpendCap, CloudSpendCapChange
from tests.factories import GroupFactory, UserFactory

pytestmark = pytest.mark.django_db

ADD = reverse("admin:cloud_cloudspendcap_add")


@pytest.fixture
def org():
    return GroupFactory(name="Acme", slug="acme", kind=Group.Kind.ORGANISATION)


@pytest.fixture
def it_admin(client):
    user = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(user)
    return user


def test_it_adds_changes_and_deletes_a_cap_and_each_is_audited(client, it_admin, org):
    response = client.post(ADD, {"group": org.pk, "amount": "5000", "currency": "eur"})
    assert response.status_code == 302, response.content.decode()[:2000]
    cap = CloudSpendCap.objects.get()
    assert (cap.amount, cap.currency, cap.set_by) == (Decimal(5000), "EUR", it_admin)
    change_url = reverse("admin:cloud_cloudspendcap_change", args=[cap.pk])
    page = client.get(change_url).content.decode()
    assert 'name="group"' not in page  # the scope of a cap is fixed; remove it and set another
    assert client.post(change_url, {"amount": "7500.5", "currency": "EUR"}).status_code == 302
    cap.refresh_from_db()
    assert cap.amount == Decimal("7500.5")
    delete_url = reverse("admin:cloud_cloudspendcap_delete", args=[cap.pk])
    assert client.post(delete_url, {"post": "yes"}).status_code == 302
    assert not CloudSpendCap.objects.exists()
    changes = CloudSpendCapChange.objects.order_by("pk")
    assert [(c.action, c.via, c.actor) for c in changes] == [
        ("set", "admin", it_admin),
        ("changed", "admin", it_admin),
        ("removed", "admin", it_admin),
    ]
    assert changes[1].after["amount"] == "7500.5000"


def test_a_bulk_delete_is_audited_cap_by_cap(client, it_admin, org):
    unit = GroupFactory(slug="research", kind=Group.Kind.BUSINESS_UNIT, parent=org)
    for group in (org, unit):
        client.post(ADD, {"group": group.pk, "amount": "10", "currency": "EUR"})
    caps = list(CloudSpendCap.objects.values_list("pk", flat=True))
    response = client.post(
        reverse("admin:cloud_cloudspendcap_changelist"),
        {"action": "delete_selected", "_selected_action": caps, "post": "yes"},
    )
    assert response.status_code == 302
    assert not CloudSpendCap.objects.exists()
    assert CloudSpendCapChange.objects.filter(action="removed", via="admin").count() == 2


@pytest.mark.parametrize(
    ("amount", "kind", "error"),
    [
        ("0", Group.Kind.ORGANISATION, "The monthly amount must be more than 0."),
        ("1e3", Group.Kind.ORGANISATION, "Plain decimal notation only"),
        ("10", Group.Kind.TEAM, "Select a valid choice."),
    ],
)
def test_a_refused_cap_shows_on_the_admin_form(client, it_admin, amount, kind, error):
    group = GroupFactory(kind=kind)
    response = client.post(ADD, {"group": group.pk, "amount": amount, "currency": "EUR"})
    assert response.status_code == 200
    assert error in response.content.decode()
    assert not CloudSpendCap.objects.exists() and not CloudSpendCapChange.objects.exists()


def test_the_audit_trail_is_read_only(client, it_admin, org):
    client.post(ADD, {"group": org.pk, "amount": "10", "currency": "EUR"})
    change = CloudSpendCapChange.objects.get()
    assert client.get(reverse("admin:cloud_cloudspendcapchange_changelist")).status_code == 200
    assert client.get(reverse("admin:cloud_cloudspendcapchange_add")).status_code == 403
    url = reverse("admin:cloud_cloudspendcapchange_change", args=[change.pk])
    client.post(url, {"action": "removed"})
    change.refresh_from_db()
    assert change.action == "set"
    delete = reverse("admin:cloud_cloudspendcapchange_delete", args=[change.pk])
    assert client.post(delete, {"post": "yes"}).status_code == 403


def test_finance_staff_may_not_change_caps(client, org):
    user = UserFactory(username="fin")
    accounts.add_membership(user=user, group=org, role=Membership.Role.FINANCE)
    client.force_login(user)
    assert client.get(ADD).status_code == 403
    assert client.post(ADD, {"group": org.pk, "amount": "10", "currency": "EUR"}).status_code == 403
    assert not CloudSpendCap.objects.exists()
