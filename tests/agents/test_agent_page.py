"""The portal's agents page: the owner creates an agent (its token shown once) and sees its caps
and spend; the team lead sees a member's agent and may use its kill switch; a stranger sees none;
IT kills agents from the admin."""

import pytest

from apps.accounts.models import Agent, ApiToken

pytestmark = pytest.mark.django_db


def test_the_owner_creates_an_agent_and_sees_its_token_once(estate, client):
    client.force_login(estate.owner)
    answer = client.post("/account/agents/", {"name": "ci-bot", "max_gpus": "2"})
    assert answer.status_code == 201
    page = answer.content.decode()
    assert "kqp_" in page and "vera via agent ci-bot" in page and "2 GPUs at once" in page
    assert "no prices yet" in page
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


def test_it_kills_an_agent_from_the_admin(estate, client):
    client.force_login(estate.it)
    answer = client.post("/admin/accounts/agent/", {"action": "kill", "_selected_action": [estate.agent.pk]})
    assert answer.status_code == 302
    assert Agent.objects.get(pk=estate.agent.pk).stopped
