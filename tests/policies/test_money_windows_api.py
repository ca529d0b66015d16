"""Money budget windows through their writes and reads (rule: each decision works in the portal,
the admin and the API): leadership sets a business unit's monthly money cap through the split;
bad amounts and currencies are refused with 400 naming the unit and the field, never 500; who may
not split gets 403; ``/api/v1/usage/`` and ``klique budget`` show each window's spend. Demo estate:
Acme Labs splits into Research and Products; the Agents team has 3.00 EUR a day."""

from argparse import Namespace
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from apps.accounts.models import User
from apps.policies.models import PolicyChange, ResourcePolicy
from apps.policies.money_windows import money_budgets_of
from apps.portal import demo
from klique.client.cli.usage import cmd_budget
from klique.client.sdk.usage import Usage

pytestmark = [pytest.mark.django_db, pytest.mark.postgres]

ACME = "/api/v1/splits/acme/"


@pytest.fixture
def estate(db):
    demo.seed()


def api(username: str) -> APIClient:
    client = APIClient()
    client.force_authenticate(User.objects.get(username=username))
    return client


def unit(slug: str, **changes) -> dict:
    p = ResourcePolicy.objects.get(group__slug=slug)
    return {
        "group": slug,
        "reservation": str(p.reservation),
        "limit": str(p.limit),
        "budget_hours": None if p.budget_hours is None else str(p.budget_hours),
        "budget_period": p.budget_period,
        "version": p.version,
    } | changes


def test_split_rule_leadership_sets_a_business_units_monthly_money_cap_audited(estate):
    cap = {"month": {"amount": "25000.50", "currency": "usd"}}
    response = api("cio").post(ACME, {"units": [unit("research", money_windows=cap)]}, format="json")
    assert response.status_code == 200, response.json()
    research = next(u for u in response.json()["units"] if u["group"] == "research")
    assert research["money_windows"] == {"month": {"amount": "25000.5000", "currency": "USD"}}
    policy = ResourcePolicy.objects.get(group__slug="research")
    assert money_budgets_of(policy) == {"month": (Decimal("25000.5000"), "USD")}
    change = PolicyChange.objects.filter(policy=policy).latest("at")
    assert change.changes == {"money_budgets": ["", "month 25000.5000 USD"]}
    assert change.actor.username == "cio"
    # left out: kept; {}: removed
    assert api("cio").post(ACME, {"units": [unit("research")]}, format="json").status_code == 200
    assert money_budgets_of(policy) == {"month": (Decimal("25000.5000"), "USD")}
    assert (
        api("cio").post(ACME, {"units": [unit("research", money_windows={})]}, format="json").status_code
        == 200
    )
    assert money_budgets_of(policy) == {}


@pytest.mark.parametrize(
    ("windows", "field"),
    [
        ({"month": {"amount": "-1", "currency": "EUR"}}, "amount"),
        ({"month": {"amount": "1.00001", "currency": "EUR"}}, "amount"),
        ({"month": {"amount": "abc", "currency": "EUR"}}, "amount"),
        ({"month": {"amount": "10", "currency": "E1R"}}, "currency"),
        ({"month": {"amount": "10", "currency": 978}}, "currency"),
        ({"month": {"amount": "10"}}, "currency"),
        ({"year": {"amount": "10", "currency": "EUR"}}, None),
        ({"month": "10"}, None),
    ],
)
def test_split_rule_a_bad_money_window_is_400_naming_the_unit_and_field(estate, windows, field):
    before = ResourcePolicy.objects.get(group__slug="research").version
    response = api("cio").post(ACME, {"units": [unit("research", money_windows=windows)]}, format="json")
    assert response.status_code == 400
    errors = response.json()["units"]["research"]["money_windows"]
    if field:
        assert field in str(errors)
    assert ResourcePolicy.objects.get(group__slug="research").version == before


@pytest.mark.parametrize("username", ["finance", "head-language", "dev-agents"])
def test_rbac_who_may_not_split_the_organisation_may_not_set_a_units_money_cap(estate, username):
    cap = {"month": {"amount": "1", "currency": "EUR"}}
    response = api(username).post(ACME, {"units": [unit("research", money_windows=cap)]}, format="json")
    assert response.status_code == 403
    assert money_budgets_of(ResourcePolicy.objects.get(group__slug="research")) == {}


def test_usage_api_and_cli_show_each_money_window_with_spend_burn_rate_and_run_out(estate, capsys):
    rows = api("dev-agents").get("/api/v1/usage/?group=agents").json()
    (agents,) = rows
    (window,) = agents["money_windows"]
    assert (window["period"], window["currency"], window["amount"]) == ("day", "EUR", "3.0000")
    assert {"spent", "left", "burn_rate", "projected_run_out", "run_out", "used_up"} <= set(window)
    assert Decimal(window["spent"]) + Decimal(window["left"]) == 3

    class Fake:
        def usage(self):
            return [Usage.from_api(row) for row in rows]

    cmd_budget(Namespace(json=False), Fake())
    out = capsys.readouterr().out
    assert "Money budgets:" in out and "€3.00" in out and "agents" in out


def test_a_money_amount_of_thirty_digits_is_refused_with_the_reason_not_a_crash():
    from apps.policies.money_windows import amount_error

    assert amount_error("1" + "0" * 30) == "Less than 100000000."
