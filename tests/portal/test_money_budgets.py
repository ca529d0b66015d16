"""Money budget windows on the portal: the team, department and finance pages show each window's
budget, spend, burn rate and run-out in its currency, in a number of queries that does not grow
with the windows; the split page sets a team's money budget per month (refused with the field's
reason, saved and audited otherwise). Demo estate: the Agents team has 3.00 EUR a day."""

from decimal import Decimal

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from apps.policies.models import PolicyChange, ResourcePolicy
from apps.policies.money_windows import money_budgets_of, set_money_windows
from tests.portal.conftest import split_form

pytestmark = pytest.mark.django_db


def policy(slug: str) -> ResourcePolicy:
    return ResourcePolicy.objects.get(group__slug=slug)


def queries(client, url: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(url)
    assert response.status_code == 200
    return len(captured.captured_queries), response.content.decode()


@pytest.mark.parametrize(
    ("username", "url", "shown"),
    [
        ("it", "/teams/agents/", "budget €3.00/day, spent €"),
        ("head-language", "/departments/language/", "Pretraining: budget €500.00/month, spent €"),
        ("finance", "/finance/", "Agents: budget €3.00/day, spent €"),
    ],
)
def test_pages_show_money_windows_next_to_spend_in_a_fixed_number_of_queries(login, username, url, shown):
    set_money_windows(policy("pretraining"), {"month": ("500", "EUR")})
    client = login(username)
    few, page = queries(client, url)
    assert shown in page and "per hour;" in page
    set_money_windows(
        policy("pretraining"), {"day": ("50", "EUR"), "week": ("200", "USD"), "month": ("500", "EUR")}
    )
    set_money_windows(policy("alignment"), {"month": ("90", "SEK")})
    set_money_windows(policy("agents"), {"day": ("3.00", "EUR"), "month": ("40", "EUR")})
    many, _ = queries(client, url)
    print(f"{url}: {few} queries with one money window, {many} with six")
    assert many <= few + 8  # a new (period, currency) pair reads its use; windows and teams add none
    assert many <= 90


def test_split_rule_the_split_page_sets_a_teams_money_budget_per_month_and_audits_it(login):
    url = "/departments/language/split/"
    data = split_form(
        ("alignment", "pretraining"), pretraining={"money_month": "750.5", "money_currency": "eur"}
    )
    assert login("head-language").post(url, data).status_code == 302
    assert money_budgets_of(policy("pretraining")) == {"month": (Decimal("750.5000"), "EUR")}
    change = PolicyChange.objects.get(policy=policy("pretraining"))
    assert change.changes == {"money_budgets": ["", "month 750.5000 EUR"]}
    page = login("head-language").get(url).content.decode()
    assert 'value="750.5"' in page and 'value="EUR"' in page


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"money_month": "10", "money_currency": "E1R"}, "Currency must be a three-letter ISO 4217 code"),
        ({"money_month": "10", "money_currency": ""}, "Currency must be a three-letter ISO 4217 code"),
        ({"money_month": "-1", "money_currency": "EUR"}, "Ensure this value is greater than or equal to 0"),
    ],
)
def test_split_rule_a_bad_money_budget_is_refused_with_the_reason_and_nothing_saved(login, fields, reason):
    data = split_form(("alignment", "pretraining"), pretraining=fields)
    response = login("head-language").post("/departments/language/split/", data)
    assert response.status_code == 400
    assert reason in response.content.decode()
    assert money_budgets_of(policy("pretraining")) == {}
    assert not PolicyChange.objects.exists()
