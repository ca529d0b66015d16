"""``/api/v1/agents/``: the owner creates (the token answered once), lists and changes their agents;
the team lead sees and caps their members' agents; a stranger may do neither (403)."""

import pytest

from apps.accounts.models import Agent
from tests.agents.conftest import bearer, client_for

pytestmark = pytest.mark.django_db


def test_the_owner_creates_an_agent_and_its_token_is_answered_once(estate):
    owner = client_for(estate.owner)
    answer = owner.post(
        "/api/v1/agents/", {"name": "ci-bot", "purpose": "CI", "max_gpus": "2"}, format="json"
    )
    assert answer.status_code == 201, answer.json()
    body = answer.json()
    assert body["token"].startswith("kqp_") and body["label"] == "vera via agent ci-bot"
    assert body["caps_in_force"]["max_gpus"] == "2.000"
    assert bearer(body["token"]).get("/api/v1/me/").json()["username"] == "vera"
    listed = owner.get("/api/v1/agents/").json()
    assert {a["name"] for a in listed} == {"eval-bot", "ci-bot"}
    assert all("token" not in a or a["token"] is None for a in listed)
    assert "gpu_hours_today" in listed[0]["usage"]


def test_bad_caps_answer_400_naming_the_field_and_a_taken_name_409(estate):
    owner = client_for(estate.owner)
    answer = owner.post("/api/v1/agents/", {"name": "x", "max_gpus": "-1"}, format="json")
    assert answer.status_code == 400 and "max_gpus" in answer.json()
    answer = owner.post("/api/v1/agents/", {"name": "eval-bot"}, format="json")
    assert answer.status_code == 409 and "already" in answer.json()["detail"]  # the name is taken


def test_a_name_of_the_longest_length_makes_an_agent_and_a_longer_one_is_a_400(estate):
    owner = client_for(estate.owner)
    answer = owner.post("/api/v1/agents/", {"name": "n" * 100}, format="json")
    assert answer.status_code == 201  # its token's name is cut to fit, the agent's is whole
    assert Agent.objects.get(pk=answer.json()["id"]).name == "n" * 100
    answer = owner.post("/api/v1/agents/", {"name": "n" * 101}, format="json")
    assert answer.status_code == 400 and "name" in answer.json()


def test_the_team_lead_sees_and_caps_a_members_agent_and_the_owner_cannot_raise_it(estate):
    lead = client_for(estate.lead)
    assert [a["label"] for a in lead.get("/api/v1/agents/").json()] == ["vera via agent eval-bot"]
    url = f"/api/v1/agents/{estate.agent.pk}/"
    answer = lead.patch(url, {"lead_max_gpu_hours_per_day": "5"}, format="json")
    assert answer.status_code == 200 and answer.json()["lead_caps"] == {"max_gpu_hours_per_day": "5.000"}
    owner = client_for(estate.owner)
    assert owner.patch(url, {"max_gpu_hours_per_day": "50"}, format="json").status_code == 200
    assert owner.get(url).json()["caps_in_force"]["max_gpu_hours_per_day"] == "5.000"
    assert owner.patch(url, {"lead_max_gpu_hours_per_day": None}, format="json").status_code == 403
    assert lead.patch(url, {"max_gpus": "8"}, format="json").status_code == 403  # the owner's own cap
    assert lead.post(f"{url}kill/").status_code == 200


def test_a_stranger_can_neither_see_nor_cap_nor_kill_an_agent(estate):
    stranger = client_for(estate.stranger)
    url = f"/api/v1/agents/{estate.agent.pk}/"
    assert stranger.get("/api/v1/agents/").json() == []
    assert stranger.get(url).status_code == 403
    assert stranger.patch(url, {"lead_max_gpus": "1"}, format="json").status_code == 403
    assert stranger.post(f"{url}kill/").status_code == 403
    assert Agent.objects.get(pk=estate.agent.pk).stopped_at is None


def test_it_sees_every_agent(estate):
    assert len(client_for(estate.it).get("/api/v1/agents/").json()) == 1
