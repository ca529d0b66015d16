"""A team lead decides who uses the group's share and which projects run first, and sees the
group's use against its reservation, limit and budget with the burn rate and projected run-out."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest
import time_machine

from apps.accounts import services as accounts
from apps.accounts.models import Membership, Project, User
from apps.engine.services import run_pass
from apps.ledger.budgets import BudgetStatus
from apps.policies import services as policies
from apps.policies.models import ResourcePolicy
from apps.portal.tables import run_out
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db

TEAM = "/teams/pretraining/"


def members(slug: str = "pretraining") -> set[str]:
    return set(Membership.objects.filter(group__slug=slug).values_list("user__username", flat=True))


def test_the_team_page_shows_use_against_the_quota_the_burn_rate_and_the_run_out(login):
    submit("dev-pretraining", "pretraining/h100-8")
    run_pass()
    page = login("lead-pretraining").get(TEAM).content.decode()
    assert "8 GPUs of a 48 GPU reservation and a 160 GPU limit" in page
    assert "Burn rate" in page and "2 budget hours per hour" in page
    # 24000 budget hours at 2 an hour last far beyond any month: the budget lasts until its reset
    assert 'id="run-out">lasts until reset 20' in page
    assert 'id="budget-run-out"' in page


def _run_out_shown(page: str) -> str:
    return page.split('id="run-out">', 1)[1].split("<", 1)[0]


def test_a_run_out_after_the_periods_reset_is_not_shown_as_a_date(login):
    # December 20th: Pretraining's monthly budget resets on 2027-01-01; at 2 budget hours an hour
    # its 24000 hours would last until 2028, long after the reset.
    with time_machine.travel(datetime(2026, 12, 20, 12, 0, tzinfo=UTC), tick=False):
        submit("dev-pretraining", "pretraining/h100-8")
        run_pass()
        page = login("lead-pretraining").get(TEAM).content.decode()
        teams = login("head-language").get("/departments/language/?export=csv&table=teams").content.decode()
    assert _run_out_shown(page) == "lasts until reset 2027-01-01 00:00 UTC"
    assert "2028-" not in page and "2027-02" not in page
    pretraining = next(line for line in teams.splitlines() if line.startswith("Pretraining,"))
    assert pretraining.endswith(",lasts until reset 2027-01-01 00:00 UTC")


def test_a_run_out_before_the_reset_is_shown_as_its_date(login):
    with time_machine.travel(datetime(2026, 12, 20, 12, 0, tzinfo=UTC), tick=False):
        submit("dev-pretraining", "pretraining/h100-8")
        run_pass()
        policies.update_policy(ResourcePolicy.objects.get(group__slug="pretraining"), budget_hours=10)
        page = login("lead-pretraining").get(TEAM).content.decode()
        teams = login("head-language").get("/departments/language/?export=csv&table=teams").content.decode()
    assert _run_out_shown(page) == "2026-12-20 17:00 UTC"  # 10 hours at 2 an hour
    pretraining = next(line for line in teams.splitlines() if line.startswith("Pretraining,"))
    assert pretraining.endswith(",2026-12-20 17:00 UTC")


RESET = datetime(2027, 1, 1, tzinfo=UTC)


def _status(**fields) -> BudgetStatus:
    values = {
        "policy_id": 1,
        "has_budget": True,
        "period": "month",
        "period_start": datetime(2026, 12, 1, tzinfo=UTC),
        "resets_at": RESET,
        "budget_hours": Decimal(100),
        "used_hours": Decimal(10),
        "left_hours": Decimal(90),
        "burn_rate": Decimal(1),
        "projected_run_out": None,
        "alert_threshold": 80,
        "used_up": False,
        "gpu_hours": Decimal(10),
        "gpus_in_use": Decimal(1),
    }
    return BudgetStatus(**(values | fields))


@pytest.mark.parametrize(
    "fields, shown",
    [
        ({"projected_run_out": datetime(2026, 12, 24, 6, 30, tzinfo=UTC)}, "2026-12-24 06:30 UTC"),
        ({"projected_run_out": RESET}, "lasts until reset 2027-01-01 00:00 UTC"),
        ({"projected_run_out": datetime(2027, 2, 6, tzinfo=UTC)}, "lasts until reset 2027-01-01 00:00 UTC"),
        ({"burn_rate": Decimal(0)}, "not burning now"),
        ({"used_up": True, "left_hours": Decimal(0)}, "used up; resets 2027-01-01 00:00 UTC"),
        ({"has_budget": False}, "no budget"),
    ],
)
def test_the_run_out_is_a_date_only_before_the_reset(fields, shown):
    assert run_out(_status(**fields)) == shown


@pytest.mark.parametrize("who", ["dev-ranking", "Dev-Ranking@acme.example"])
def test_the_lead_adds_a_member_by_username_or_email(login, who):
    response = login("lead-pretraining").post(f"{TEAM}members/", {"user": who})
    assert response.status_code == 302
    assert "dev-ranking" in members()


@pytest.mark.parametrize(
    "who, message",
    [
        ("nobody", "No one with the username or email &#x27;nobody&#x27;."),
        ("dev-pretraining", "dev-pretraining is already in Pretraining."),
    ],
)
def test_adding_an_unknown_person_or_a_member_again_is_refused_with_the_reason(login, who, message):
    response = login("lead-pretraining").post(f"{TEAM}members/", {"user": who})
    assert response.status_code == 400 and message in response.content.decode()


def test_the_lead_removes_a_member_but_not_a_role(login):
    client = login("lead-pretraining")
    member = Membership.objects.get(user__username="dev-pretraining", group__slug="pretraining")
    lead = Membership.objects.get(user__username="lead-pretraining", group__slug="pretraining")
    assert client.post(f"{TEAM}members/{lead.pk}/remove/").status_code == 403
    assert client.post(f"{TEAM}members/{member.pk}/remove/").status_code == 302
    assert members() == {"lead-pretraining"}


def test_a_member_or_another_teams_lead_changes_nothing(login):
    accounts.add_membership(
        user=User.objects.get(username="dev-vision"), group=_group("ranking"), role=Membership.Role.TEAM_LEAD
    )
    for username in ("dev-pretraining", "dev-vision", "finance"):
        client = login(username)
        assert client.post(f"{TEAM}members/", {"user": "dev-ranking"}).status_code == 403
        project = Project.objects.get(name="llm-7b")
        assert client.post(f"{TEAM}projects/{project.pk}/priority/", {"priority": "1"}).status_code == 403
    assert "dev-ranking" not in members()
    assert Project.objects.get(name="llm-7b").priority == 100


def test_the_lead_sets_project_priorities(login):
    project = Project.objects.get(name="llm-70b")
    response = login("lead-pretraining").post(f"{TEAM}projects/{project.pk}/priority/", {"priority": "10"})
    assert response.status_code == 302
    assert Project.objects.get(pk=project.pk).priority == 10


@pytest.mark.parametrize(
    "value, message",
    [
        ("-1", "Ensure this value is greater than or equal to 0."),
        ("soon", "Enter a whole number."),
        ("7_7", "Enter a whole number."),
        ("\uff15\uff15", "Enter a whole number."),
    ],
)
def test_a_bad_priority_is_refused_with_the_reason(login, value, message):
    project = Project.objects.get(name="llm-70b")
    response = login("lead-pretraining").post(f"{TEAM}projects/{project.pk}/priority/", {"priority": value})
    assert response.status_code == 400
    assert f"Priority of llm-70b: {message}" in response.content.decode()
    assert Project.objects.get(pk=project.pk).priority == 100


def test_a_project_of_another_group_is_not_found_under_this_team(login):
    other = Project.objects.get(name="rlhf")
    assert (
        login("lead-pretraining").post(f"{TEAM}projects/{other.pk}/priority/", {"priority": "1"}).status_code
        == 404
    )


def test_the_service_sets_a_project_priority(estate):
    project = accounts.set_project_priority(Project.objects.get(name="rlhf"), 5)
    assert Project.objects.get(pk=project.pk).priority == 5


def _group(slug):
    from apps.accounts.models import Group

    return Group.objects.get(slug=slug)
