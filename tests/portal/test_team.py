"""A team lead decides who uses the group's share and which projects run first, and sees the
group's use against its reservation, limit and budget with the burn rate and projected run-out."""

import pytest

from apps.accounts import services as accounts
from apps.accounts.models import Membership, Project, User
from apps.engine.services import run_pass
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db

TEAM = "/teams/pretraining/"


def members(slug: str = "pretraining") -> set[str]:
    return set(Membership.objects.filter(group__slug=slug).values_list("user__username", flat=True))


def test_the_team_page_shows_use_against_the_quota_the_burn_rate_and_the_run_out(login):
    submit("dev-pretraining", "pretraining/h100-8")
    run_pass()
    page = login("lead-pretraining").get(TEAM).content.decode()
    assert "8.000 GPUs of a 48.000 GPU reservation and a 160.000 GPU limit" in page
    assert "Burn rate" in page and "2.000 budget hours per hour" in page
    assert 'id="run-out">20' in page  # a date: the budget runs out at this rate
    assert 'id="budget-run-out"' in page


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
    [("-1", "Ensure this value is greater than or equal to 0."), ("soon", "Enter a whole number.")],
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
