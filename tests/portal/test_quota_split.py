"""A department head splits the department's quota between its teams: valid changes are saved
together and audited; each invalid change is refused with the rule it breaks, and nothing is saved."""

from decimal import Decimal

import pytest

from apps.accounts.models import User
from apps.policies.models import PolicyChange, ResourcePolicy
from apps.portal import services

pytestmark = pytest.mark.django_db

URL = "/departments/language/split/"


def policy(slug: str) -> ResourcePolicy:
    return ResourcePolicy.objects.get(group__slug=slug)


def split_data(**changes) -> dict:
    """The split form of Language as the page shows it, with ``changes`` {team: {field: value}}."""
    data = {}
    for slug in ("alignment", "pretraining"):
        p = policy(slug)
        row = {
            "reservation": p.reservation,
            "limit": p.limit,
            "budget_hours": "" if p.budget_hours is None else p.budget_hours,
            "budget_period": p.budget_period,
        } | changes.get(slug, {})
        data |= {f"p{p.pk}-{field}": value for field, value in row.items()}
    return data


def test_moving_gpus_between_teams_is_saved_whatever_the_order_of_the_rows(login):
    # Language reserves 80: pretraining 48 + alignment 24. Alignment takes 8 more from pretraining.
    client = login("head-language")
    response = client.post(
        URL, split_data(alignment={"reservation": "32"}, pretraining={"reservation": "40"})
    )
    assert response.status_code == 302 and response["Location"] == "/departments/language/"
    assert policy("alignment").reservation == 32 and policy("pretraining").reservation == 40


def test_each_saved_change_is_in_the_audit_trail_with_who_and_the_values_before_and_after(login):
    client = login("head-language")
    client.post(URL, split_data(alignment={"limit": "60", "budget_hours": "7000"}))
    change = PolicyChange.objects.get()
    assert change.policy == policy("alignment") and change.actor.username == "head-language"
    assert change.changes == {"limit": ["64.000", "60.000"], "budget_hours": ["8000.000", "7000.000"]}
    page = client.get("/departments/language/").content.decode()
    assert "limit: 64 → 60; budget_hours: 8000 → 7000" in page


def test_an_unchanged_form_saves_nothing_and_audits_nothing(login):
    response = login("head-language").post(URL, split_data())
    assert response.status_code == 302
    assert not PolicyChange.objects.exists()


@pytest.mark.parametrize(
    "changes, message",
    [
        (
            {"alignment": {"reservation": "40"}},
            "Reservation (40) brings the reservations under Language policy to 88, "
            "above its reservation (80).",
        ),
        (
            {"pretraining": {"limit": "240"}},
            "Limit (240) cannot exceed the limit of the parent Language policy (200).",
        ),
        (
            {"alignment": {"budget_hours": "20000"}},
            "Time budget (20000 h) brings the budgets under Language policy to 44000 h, "
            "above its budget (40000 h).",
        ),
        (
            {"alignment": {"limit": "10", "reservation": "24"}},
            "Limit (10) must be at least the reservation (24).",
        ),
        (
            {"alignment": {"budget_period": "week"}},
            "Budget period must match the parent Language policy (month).",
        ),
    ],
    ids=[
        "reservations-above-the-department",
        "limit-above-the-department",
        "budgets-above-the-department",
        "limit-below-reservation",
        "period-other-than-the-department",
    ],
)
def test_a_change_that_breaks_a_rule_is_refused_with_its_message_and_nothing_is_saved(
    login, changes, message
):
    before = {
        slug: (policy(slug).reservation, policy(slug).limit, policy(slug).budget_hours) for slug in changes
    }
    # A valid change on the other team is refused with it: the split is saved whole or not at all.
    other = "pretraining" if "alignment" in changes else "alignment"
    response = login("head-language").post(URL, split_data(**changes, **{other: {"limit": "50"}}))
    assert response.status_code == 400
    assert message in response.content.decode()
    assert {
        slug: (policy(slug).reservation, policy(slug).limit, policy(slug).budget_hours) for slug in changes
    } == before
    assert policy(other).limit != 50
    assert not PolicyChange.objects.exists()


def test_bad_input_is_refused_on_the_field_with_the_reason(login):
    response = login("head-language").post(
        URL, split_data(alignment={"reservation": "1.2345", "limit": "lots"})
    )
    assert response.status_code == 400
    page = response.content.decode()
    assert "Alignment, Reservation (GPUs): Ensure that there are no more than 3 decimal places." in page
    assert "Alignment, Limit (GPUs): Enter a number." in page


def test_a_team_lead_or_another_departments_head_may_not_split(login):
    assert login("lead-pretraining").post(URL, split_data(alignment={"reservation": "20"})).status_code == 403
    assert login("finance").post(URL, split_data(alignment={"reservation": "20"})).status_code == 403
    assert policy("alignment").reservation == 24


def test_the_service_refuses_a_policy_that_is_not_directly_below(estate):
    with pytest.raises(ValueError):
        services.split_quota(
            policy("language"), {policy("ranking").pk: {}}, actor=User.objects.get(username="head-language")
        )


def test_clearing_a_team_budget_while_raising_another_fits_the_department(login):
    client = login("head-language")
    response = client.post(
        URL,
        split_data(
            alignment={"budget_hours": "", "budget_period": ""}, pretraining={"budget_hours": "32000"}
        ),
    )
    assert response.status_code == 302
    assert policy("alignment").budget_hours is None and policy("pretraining").budget_hours == Decimal("32000")
