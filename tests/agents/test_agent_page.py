"""The portal's agents page: the owner creates an agent (its token shown once) and sees its caps
and spend; the team lead sees a member's agent and may use its kill switch; a stranger sees none;
IT kills agents from the admin."""

import pytest

from apps.accounts.models import Agent, ApiToken

pytestmark = pytest.mark.django_db


def test_the_owner_creates_an_agent_and_sees_its_token_once(estate, client):
    client.force_login(estate.owner)
    answer = client.post("/account/agents/", {"name": "ci-bot", "max_gpus": "2", "max_money_per_month": "80"})
    assert answer.status_code == 201
    page = answer.content.decode()
    assert "kqp_" in page and "vera via agent ci-bot" in page and "2 GPUs at once" in page
    assert "80 money per month" in page and "no prices yet" in page
    assert "kqp_" not in client.get("/account/agents/").content.decode()


def test_the_lead_kills_a_members_agent_and_a_stranger_cannot(estate, client):
    client.force_login(estate.stranger)
    assert "eval-bot" not in client.get("/account/agents/").content.decode()
    assert client.post(f"/account/agents/{estate.agent.pk}/kill/").status_code == 404
    client.force_login(estate.lead)
    assert "vera via agent eval-bot" in client.get("/account/agents/").content.decode()
    assert client.post(f"/account/agents/{estate.agent.pk}/kill/").status_code == 302
    assert Agent.objects.get(pk=estate.agent.pk).stopped
    assert not ApiToken.objects.filter(agent=estate.agent, revoked_at__isnull=True).exists()


def test_the_lead_caps_a_members_agent_on_the_page_and_the_owner_cannot_raise_it(estate, client):
    client.force_login(estate.lead)
    answer = client.post(f"/account/agents/{estate.agent.pk}/caps/", {"max_gpus": "1"})
    assert answer.status_code == 302
    agent = Agent.objects.get(pk=estate.agent.pk)
    assert agent.lead_caps == {"max_gpus": "1"} and agent.max_gpus is None
    client.force_login(estate.owner)
    client.post(f"/account/agents/{estate.agent.pk}/caps/", {"max_gpus": "6", "max_money_per_month": "50"})
    agent = Agent.objects.get(pk=estate.agent.pk)
    assert agent.max_gpus == 6 and agent.cap("max_gpus") == 1  # the lead's ceiling holds
    assert agent.max_money_per_month == 50
    assert "1 GPUs at once" in client.get("/account/agents/").content.decode()


def test_a_bad_cap_on_the_page_is_refused_naming_it_and_a_stranger_sets_none(estate, client):
    client.force_login(estate.owner)
    page = client.post(f"/account/agents/{estate.agent.pk}/caps/", {"max_gpus": "-1"}, follow=True)
    assert Agent.objects.get(pk=estate.agent.pk).max_gpus is None
    assert "GPUs at once: give a number of at least 0." in page.content.decode()
    client.force_login(estate.stranger)
    assert client.post(f"/account/agents/{estate.agent.pk}/caps/", {"max_gpus": "9"}).status_code == 404


def test_it_kills_an_agent_from_the_admin(estate, client):
    client.force_login(estate.it)
    answer = client.post("/admin/accounts/agent/", {"action": "kill", "_selected_action": [estate.agent.pk]})
    assert answer.status_code == 302
    assert Agent.objects.get(pk=estate.agent.pk).stopped
