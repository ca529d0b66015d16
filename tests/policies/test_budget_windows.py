"""Several time budget windows on one policy: the rules (one window per period, none without the
policy's own time budget, each inside the parent's window of the same period, in both directions)
and the admin's inline, which refuses a repeated period and audits a change."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.policies import rules, services
from apps.policies.models import BudgetWindow, PolicyChange
from tests.factories import GroupFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def tree():
    """Org: 100 h a day and 1000 a month; its team: 10 h a day."""
    org = services.create_policy(
        group=GroupFactory(kind="organisation", name="Org"),
        reservation=8,
        limit=16,
        budget_hours=100,
        budget_period="day",
    )
    services.set_budget_windows(org, {"month": Decimal(1000)})
    team = services.create_policy(
        group=GroupFactory(parent=org.group, name="Team"),
        reservation=4,
        limit=8,
        budget_hours=10,
        budget_period="day",
    )
    return org, team


def refused(call) -> list[str]:
    with pytest.raises(ValidationError) as error:
        call()
    return error.value.message_dict["extra_budgets"]


def test_a_child_window_may_not_exceed_the_parent_window_of_the_same_period(tree):
    org, team = tree
    assert refused(lambda: services.set_budget_windows(team, {"month": Decimal(1001)})) == [
        "Time budget per month (1001 h) brings the budgets per month under Org policy to 1001 h, "
        "above its budget per month (1000 h)."
    ]
    services.set_budget_windows(team, {"month": Decimal(1000)})
    assert services.extra_budgets_of(team) == {"month": Decimal("1000.000")}


def test_a_parent_window_may_not_go_below_its_children_windows_of_the_same_period(tree):
    org, team = tree
    services.set_budget_windows(team, {"month": Decimal(600)})
    assert refused(lambda: services.set_budget_windows(org, {"month": Decimal(500)})) == [
        "Time budget per month (500 h) is below the sum of the budgets per month of its children (600 h)."
    ]
    assert services.extra_budgets_of(org) == {"month": Decimal("1000.000")}


def test_the_policy_own_period_is_not_repeated_and_windows_need_the_own_budget(tree):
    org, team = tree
    assert refused(lambda: services.set_budget_windows(team, {"day": Decimal(5)})) == [
        "The policy's time budget is already per day; one window per period."
    ]
    bare = services.create_policy(group=GroupFactory(name="Bare"), reservation=0, limit=1)
    assert refused(lambda: services.set_budget_windows(bare, {"week": Decimal(5)})) == [
        "Set the policy's time budget before adding further time budget windows."
    ]
    assert refused(lambda: services.set_budget_windows(team, {"week": Decimal(-1)})) == [
        "The time budget per week must be 0 budget hours or more."
    ]
    assert not BudgetWindow.objects.filter(policy__in=[team, bare]).exists()


def test_the_own_window_may_not_move_onto_a_further_window_nor_go_while_there_are_some(tree):
    org, team = tree
    errors = rules.policy_errors(org.__class__(**{**_fields(org), "budget_period": "month"}))
    assert (
        "The policy already has a further time budget window per month; one window per period."
        in (errors["budget_period"])
    )
    errors = rules.policy_errors(org.__class__(**{**_fields(org), "budget_hours": None, "budget_period": ""}))
    assert errors["budget_hours"] == [
        "The policy has further time budget windows; remove them before removing its time budget."
    ]


def _fields(policy) -> dict:
    return {f.attname: getattr(policy, f.attname) for f in policy._meta.concrete_fields}


def test_the_sums_of_the_own_window_count_the_siblings_further_windows(tree):
    org, team = tree
    services.set_budget_windows(team, {"month": Decimal(900)})
    sibling = services.create_policy(
        group=GroupFactory(parent=org.group, name="Sibling"),
        reservation=0,
        limit=8,
        budget_hours=50,
        budget_period="day",
    )
    assert refused(lambda: services.set_budget_windows(sibling, {"month": Decimal(200)})) == [
        "Time budget per month (200 h) brings the budgets per month under Org policy to 1100 h, "
        "above its budget per month (1000 h)."
    ]


def test_a_window_change_raises_the_version_and_is_audited(tree):
    org, team = tree
    before = team.version
    actor = UserFactory()
    services.set_budget_windows(team, {"week": Decimal(40)}, actor=actor, via=PolicyChange.Via.ADMIN)
    team.refresh_from_db()
    assert team.version == before + 1
    assert PolicyChange.objects.get(policy=team).changes == {"further_budgets": ["", "week 40.000"]}


@pytest.fixture
def it_admin(client):
    user = UserFactory(username="it-admin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN)
    client.force_login(user)
    return user


def admin_post(client, policy, windows):
    data = {
        "group": policy.group_id,
        "reservation": str(policy.reservation),
        "limit": str(policy.limit),
        "budget_hours": str(policy.budget_hours),
        "budget_period": policy.budget_period,
        "alert_threshold": str(policy.alert_threshold),
        "seen_version": policy.version,
        "compute_resources-TOTAL_FORMS": "0",
        "compute_resources-INITIAL_FORMS": "0",
        "extra_budgets-TOTAL_FORMS": str(len(windows)),
        "extra_budgets-INITIAL_FORMS": "0",
    }
    for i, (period, hours) in enumerate(windows):
        data |= {f"extra_budgets-{i}-period": period, f"extra_budgets-{i}-hours": hours}
    return client.post(reverse("admin:policies_resourcepolicy_change", args=[policy.pk]), data)


def test_the_admin_inline_refuses_the_policy_own_period_again(client, it_admin, tree):
    org, team = tree
    response = admin_post(client, team, [("day", "5")])
    assert response.status_code == 200
    assert "The policy&#x27;s time budget is already per day; one window per period." in (
        response.content.decode()
    )
    assert not BudgetWindow.objects.filter(policy=team).exists()


def test_the_admin_inline_refuses_two_windows_of_one_period(client, it_admin, tree):
    org, team = tree
    response = admin_post(client, team, [("week", "5"), ("week", "6")])
    assert response.status_code == 200
    assert not BudgetWindow.objects.filter(policy=team).exists()


def test_the_admin_inline_refuses_a_window_above_the_parent_window(client, it_admin, tree):
    org, team = tree
    response = admin_post(client, team, [("month", "1500")])
    assert response.status_code == 200
    assert "above its budget per month (1000 h)" in response.content.decode()
    assert not BudgetWindow.objects.filter(policy=team).exists()


def test_the_admin_inline_saves_a_window_and_audits_it(client, it_admin, tree):
    org, team = tree
    response = admin_post(client, team, [("month", "300")])
    assert response.status_code == 302
    assert services.extra_budgets_of(team) == {"month": Decimal("300.000")}
    change = PolicyChange.objects.get(policy=team)
    assert change.via == "admin" and change.changes == {"further_budgets": ["", "month 300.000"]}


def test_the_admin_list_shows_each_window_on_its_own_line(client, it_admin, tree):
    page = client.get(reverse("admin:policies_resourcepolicy_changelist")).content.decode()
    assert "day: 100<br>month: 1,000" in page  # Org's budget left per window
    assert "day: not burning now<br>month: not burning now" in page
