# ruff: noqa: F811  (the fixtures it_admin and tree are imported from the time windows' tests)
"""Money budget windows in the admin's inline (rule: each decision works in the portal, the admin
and the API): a window has budget hours or an amount and a currency, one money window per period
beside the time windows; a bad one is refused with the field's reason, a saved one is audited."""

from decimal import Decimal

import pytest
from django.urls import reverse

from apps.policies import services
from apps.policies.models import BudgetWindow, PolicyChange
from apps.policies.money_windows import money_budgets_of
from tests.policies.test_budget_windows import it_admin, tree  # noqa: F401  (fixtures)

pytestmark = pytest.mark.django_db


def admin_post(client, policy, rows):
    """The policy's change form with the inline rows (period, hours, amount, currency)."""
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
        "extra_budgets-TOTAL_FORMS": str(len(rows)),
        "extra_budgets-INITIAL_FORMS": "0",
    }
    for i, (period, hours, amount, currency) in enumerate(rows):
        data |= {
            f"extra_budgets-{i}-period": period,
            f"extra_budgets-{i}-hours": hours,
            f"extra_budgets-{i}-amount": amount,
            f"extra_budgets-{i}-currency": currency,
        }
    return client.post(reverse("admin:policies_resourcepolicy_change", args=[policy.pk]), data)


def test_admin_rule_a_money_window_beside_a_time_window_of_the_same_period_is_saved_and_audited(
    client,
    it_admin,
    tree,
):
    _, team = tree
    response = admin_post(client, team, [("month", "300", "", ""), ("month", "", "450.25", "chf")])
    assert response.status_code == 302
    assert services.extra_budgets_of(team) == {"month": Decimal("300.000")}
    assert money_budgets_of(team) == {"month": (Decimal("450.2500"), "CHF")}
    assert PolicyChange.objects.get(policy=team).changes == {
        "further_budgets": ["", "month 300.000"],
        "money_budgets": ["", "month 450.2500 CHF"],
    }


@pytest.mark.parametrize(
    ("rows", "reason"),
    [
        ([("week", "5", "10", "EUR")], "A window has budget hours or an amount, not both."),
        ([("week", "", "", "")], "Enter budget hours, or an amount and a currency."),
        ([("week", "", "10", "E1R")], "Currency must be a three-letter ISO 4217 code"),
        ([("week", "", "10", "EUR"), ("week", "", "11", "USD")], "one money window per period"),
        ([("week", "", "-1", "EUR")], "Ensure this value is greater than or equal to 0."),
    ],
)
def test_admin_rule_a_bad_money_window_is_refused_with_the_reason(client, it_admin, tree, rows, reason):
    _, team = tree
    response = admin_post(client, team, rows)
    assert response.status_code == 200
    assert reason in response.content.decode().replace("&#x27;", "'")
    assert not BudgetWindow.objects.filter(policy=team).exists()
    assert not PolicyChange.objects.filter(policy=team).exists()
