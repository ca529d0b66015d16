"""A quota write from a form carries the version each policy had when the form was shown; a policy
saved since refuses the write, which saves nothing and shows the current values (rule: a stale
form is never applied over a newer change). The portal's split form is in
tests/portal/test_quota_split.py; the concurrent races, on PostgreSQL, in
tests/portal/test_quota_split_concurrency.py."""

import re
from decimal import Decimal

import pytest
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.policies import services
from apps.policies.models import PolicyChange, ResourcePolicy
from tests.factories import GroupFactory, UserFactory

pytestmark = pytest.mark.django_db

STALE = "changed by someone else since you opened this page"


@pytest.fixture
def it_admin(client):
    user = UserFactory(username="it-admin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN)
    client.force_login(user)
    return user


@pytest.fixture
def team():
    """A team policy (reservation 4, limit 8, 100 h a month) under a department (10, 20, 400 h)."""
    department = GroupFactory(name="Department", kind="department")
    services.create_policy(
        group=department, reservation=10, limit=20, budget_hours=400, budget_period="month"
    )
    return services.create_policy(
        group=GroupFactory(name="Team", parent=department),
        reservation=4,
        limit=8,
        budget_hours=100,
        budget_period="month",
    )


def change_url(policy) -> str:
    return reverse("admin:policies_resourcepolicy_change", args=[policy.pk])


def shown(client, policy) -> dict:
    """The admin change form's fields as the page renders them (hidden version included)."""
    page = client.get(change_url(policy)).content.decode()
    version = re.search(r'name="seen_version" value="(\d+)"', page).group(1)
    return {
        "group": policy.group_id,
        "reservation": str(policy.reservation),
        "limit": str(policy.limit),
        "budget_hours": str(policy.budget_hours),
        "budget_period": policy.budget_period,
        "alert_threshold": str(policy.alert_threshold),
        "seen_version": version,
        "compute_resources-TOTAL_FORMS": "0",
        "compute_resources-INITIAL_FORMS": "0",
        "extra_budgets-TOTAL_FORMS": "0",
        "extra_budgets-INITIAL_FORMS": "0",
    }


def test_an_admin_form_opened_before_another_save_is_refused_and_shows_the_current_values(
    client, it_admin, team
):
    form = shown(client, team) | {"reservation": "6"}
    services.update_policy(team, limit=Decimal("12"), budget_hours=Decimal("150"))  # the head, meanwhile

    response = client.post(change_url(team), form)
    assert response.status_code == 409
    page = response.content.decode()
    assert f"Team was {STALE}, so nothing was saved." in page
    assert "Team: reservation 4, limit 12, time budget 150 h per month" in page
    team.refresh_from_db()
    # Saving the stale form would have put the limit back to 8 and the budget to 100.
    assert (team.reservation, team.limit, team.budget_hours) == (4, 12, 150)
    assert not PolicyChange.objects.filter(via="admin").exists()
    assert 'name="limit" value="12.000"' in page
    assert f'name="seen_version" value="{team.version}"' in page

    again = shown(client, team) | {"reservation": "6"}
    assert client.post(change_url(team), again).status_code == 302
    team.refresh_from_db()
    assert (team.reservation, team.limit, team.budget_hours) == (6, 12, 150)
    change = PolicyChange.objects.get(via="admin")
    assert change.actor == it_admin and change.changes == {"reservation": ["4.000", "6.000"]}


def test_an_admin_change_without_the_version_is_refused_on_the_field(client, it_admin, team):
    form = {k: v for k, v in shown(client, team).items() if k != "seen_version"} | {"reservation": "6"}
    response = client.post(change_url(team), form)
    assert response.status_code == 200 and "This field is required." in response.content.decode()
    team.refresh_from_db()
    assert team.reservation == 4


def test_an_admin_change_with_the_current_version_still_meets_the_sum_rules(client, it_admin, team):
    response = client.post(change_url(team), shown(client, team) | {"budget_hours": "500"})
    assert response.status_code == 200
    page = response.content.decode()
    assert "Time budget (500 h) brings the budgets under Department policy to 500 h" in page


@pytest.mark.parametrize(
    "write",
    [
        lambda policy, version: services.update_policy(policy, version=version, reservation=Decimal("5")),
        lambda policy, version: services.save_policy(policy, version=version),
    ],
    ids=["update_policy", "save_policy"],
)
def test_the_services_refuse_a_stale_version_and_save_nothing(team, write):
    seen = team.version
    services.update_policy(ResourcePolicy.objects.get(pk=team.pk), budget_hours=Decimal("90"))
    with pytest.raises(services.QuotaChanged) as refused:
        write(team, seen)
    assert f"Team was {STALE}" in str(refused.value)
    team.refresh_from_db()
    assert (team.reservation, team.budget_hours, team.version) == (4, 90, seen + 1)


def test_update_policy_keeps_the_stored_values_of_fields_it_does_not_set(team):
    """A caller holding an old copy of a policy changes only the fields it names."""
    old_copy = ResourcePolicy.objects.get(pk=team.pk)
    services.update_policy(team, limit=Decimal("10"))
    services.update_policy(old_copy, reservation=Decimal("5"))
    team.refresh_from_db()
    assert (team.reservation, team.limit) == (5, 10) and old_copy.limit == 10
