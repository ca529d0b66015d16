"""Several time budget windows in the portal and the API: the department head's split sets each
team's further windows inside the department's window of the same period (refused whole
otherwise, audited when saved); team and department pages, IT's table and the usage API show each
window's used, left, burn rate and run-out."""

from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from apps.accounts.models import User
from apps.policies import services as policies
from apps.policies import split
from apps.policies.models import BudgetWindow, PolicyChange, ResourcePolicy
from tests.portal.conftest import split_form

pytestmark = pytest.mark.django_db

URL = "/departments/language/split/"


def policy(slug: str) -> ResourcePolicy:
    return ResourcePolicy.objects.get(group__slug=slug)


@pytest.fixture
def day_window(estate):
    """Language (40000 h a month) gets a second window of 100 h a day."""
    policies.set_budget_windows(policy("language"), {"day": Decimal(100)})


def split_data(**changes) -> dict:
    return split_form(("alignment", "pretraining"), **changes)


def test_the_split_refuses_a_team_window_above_the_department_window_of_that_period(login, day_window):
    response = login("head-language").post(
        URL, split_data(alignment={"window_day": "60"}, pretraining={"window_day": "50"})
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "Time budget per day (50 h) brings the budgets per day under Language policy to 110 h" in page
    assert not BudgetWindow.objects.filter(hours__isnull=False).exclude(policy=policy("language")).exists()
    assert not PolicyChange.objects.exists()


def test_the_split_refuses_a_window_repeating_the_team_own_period(login, day_window):
    response = login("head-language").post(URL, split_data(alignment={"window_month": "10"}))
    assert response.status_code == 400
    assert "The policy&#x27;s time budget is already per month; one window per period." in (
        response.content.decode()
    )


def test_the_split_saves_each_team_windows_and_audits_them(login, day_window):
    response = login("head-language").post(
        URL,
        split_data(alignment={"window_day": "60"}, pretraining={"window_day": "40", "window_week": "900"}),
    )
    assert response.status_code == 302
    assert policies.extra_budgets_of(policy("alignment")) == {"day": Decimal("60.000")}
    assert policies.extra_budgets_of(policy("pretraining")) == {
        "day": Decimal("40.000"),
        "week": Decimal("900.000"),
    }
    changes = dict(PolicyChange.objects.values_list("policy__group__slug", "changes"))
    assert changes == {
        "alignment": {"further_budgets": ["", "day 60.000"]},
        "pretraining": {"further_budgets": ["", "day 40.000; week 900.000"]},
    }
    page = login("head-language").get(URL).content.decode()
    assert 'name="p{}-window_day" value="60"'.format(policy("alignment").pk) in page


def test_the_split_moves_day_hours_between_teams_whatever_the_order(login, day_window):
    head = User.objects.get(username="head-language")
    alignment, pretraining = policy("alignment"), policy("pretraining")
    split.split_quota(
        policy("language"),
        {
            alignment.pk: {**policies.quota_of(alignment), "extra_budgets": {"day": Decimal(70)}},
            pretraining.pk: {**policies.quota_of(pretraining), "extra_budgets": {"day": Decimal(30)}},
        },
        actor=head,
    )
    split.split_quota(
        policy("language"),
        {
            alignment.pk: {**policies.quota_of(alignment), "extra_budgets": {"day": Decimal(20)}},
            pretraining.pk: {**policies.quota_of(pretraining), "extra_budgets": {"day": Decimal(80)}},
        },
        actor=head,
    )
    assert policies.extra_budgets_of(pretraining) == {"day": Decimal("80.000")}


def test_pages_and_the_api_show_each_window(login, day_window):
    policies.set_budget_windows(policy("pretraining"), {"day": Decimal(50)})
    team = login("lead-pretraining").get("/teams/pretraining/").content.decode()
    assert '<li data-window="month">Per month: ' in team
    assert '<li data-window="day">Per day: 0 of 50 budget hours used, 50 left' in team
    department = login("head-language").get("/departments/language/").content.decode()
    assert '<li data-window="day">Per day: 0 of 100 budget hours used' in department
    assert "month<br>day" in department  # the teams table: one line per window
    client = APIClient()
    client.force_authenticate(User.objects.get(username="lead-pretraining"))
    (row,) = [r for r in client.get("/api/v1/usage/").json() if r["group"]["slug"] == "pretraining"]
    assert [(w["period"], w["budget_hours"]) for w in row["windows"]] == [
        ("month", "24000.000"),
        ("day", "50.000"),
    ]
    assert row["windows"][1]["left_hours"] == "50.000" and row["windows"][1]["used_up"] is False
