"""A department head splits the department's quota between its teams: valid changes are saved
together and audited; each invalid change is refused with the rule it breaks, and nothing is saved;
a form opened before someone else saved is refused, never applied over the newer change."""

import re
from decimal import Decimal

import pytest

from apps.accounts.models import User
from apps.policies import services as policies
from apps.policies import split
from apps.policies.models import PolicyChange, ResourcePolicy
from tests.portal.conftest import split_form

pytestmark = pytest.mark.django_db

URL = "/departments/language/split/"


def policy(slug: str) -> ResourcePolicy:
    return ResourcePolicy.objects.get(group__slug=slug)


def split_data(**changes) -> dict:
    """The split form of Language as the page shows it, with ``changes`` {team: {field: value}}."""
    return split_form(("alignment", "pretraining"), **changes)


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
    assert "limit: 64 → 60; time budget (budget hours): 8000 → 7000" in page


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
        split.split_quota(
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


# Stale forms (rule: a quota write carries the version of each row the form showed; a row saved
# since refuses the write whole with 409 and shows the current values). The concurrent versions
# of these, on PostgreSQL, are in test_quota_split_concurrency.py.

STALE = "changed by someone else since you opened this page"


def shown_version(page: str, p: ResourcePolicy) -> str:
    return re.search(rf'name="p{p.pk}-version" value="(\d+)"', page).group(1)


def test_a_split_form_opened_before_another_change_is_refused_and_shows_the_current_values(login):
    head_form = split_data(alignment={"reservation": "32"})  # the head opens the page
    it = login("it")
    assert it.post(URL, split_data(pretraining={"reservation": "56"})).status_code == 302

    head = login("head-language")
    response = head.post(URL, head_form)
    # Applying it would set Pretraining back to 48 (its value on the head's page): refused instead.
    assert response.status_code == 409
    page = response.content.decode()
    assert f"Pretraining was {STALE}, so nothing was saved." in page
    assert "Pretraining: reservation 56, limit 160, time budget 24000 h per month" in page
    assert policy("pretraining").reservation == 56 and policy("alignment").reservation == 24
    assert PolicyChange.objects.count() == 1
    # The page now shows the current values and versions: the head's change made on them is saved.
    pretraining = policy("pretraining")
    assert f'name="p{pretraining.pk}-reservation" value="56"' in page
    assert shown_version(page, pretraining) == str(pretraining.version)
    on_current = split_data(pretraining={"reservation": "48"}, alignment={"reservation": "32"})
    assert head.post(URL, on_current).status_code == 302
    assert policy("pretraining").reservation == 48 and policy("alignment").reservation == 32


def test_a_stale_row_the_form_did_not_change_refuses_the_split_too(login):
    """The head only changed Pretraining, but the page showed Alignment's old budget: saving the
    form whole would put it back, so the split is refused."""
    head_form = split_data(pretraining={"limit": "150"})
    login("it").post(URL, split_data(alignment={"budget_hours": "6000"}))
    response = login("head-language").post(URL, head_form)
    assert response.status_code == 409 and f"Alignment was {STALE}" in response.content.decode()
    assert policy("alignment").budget_hours == 6000 and policy("pretraining").limit == 160


def test_a_split_without_the_versions_is_refused_on_the_field(login):
    data = {key: value for key, value in split_data().items() if not key.endswith("-version")}
    response = login("head-language").post(URL, data)
    assert response.status_code == 400
    assert "Alignment, Version shown: This field is required." in response.content.decode()


def test_each_save_counts_one_more_version(estate):
    before = policy("alignment").version
    split.split_quota(
        policy("language"),
        {policy("alignment").pk: {**split_row("alignment"), "reservation": Decimal("20")}},
        actor=User.objects.get(username="head-language"),
        versions={policy("alignment").pk: before},
    )
    assert policy("alignment").version > before
    with pytest.raises(policies.QuotaChanged):
        split.split_quota(
            policy("language"),
            {policy("alignment").pk: split_row("alignment")},
            actor=User.objects.get(username="head-language"),
            versions={policy("alignment").pk: before},
        )


def split_row(slug: str) -> dict:
    return policies.quota_of(policy(slug))
