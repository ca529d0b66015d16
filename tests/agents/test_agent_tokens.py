"""An agent's token: it acts as its owner and names the agent on its work; the kill switch revokes
it and stops the agent's work; an agent's token manages no agents and creates no schedules."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.accounts import agents
from apps.accounts.models import ApiToken, Notification
from apps.engine import services as engine
from apps.ledger.models import UsageInterval
from apps.tasks.models import Task
from tests.agents.conftest import bearer, client_for

pytestmark = pytest.mark.django_db


def submit(client, resource, gpus=1, **extra):
    return client.post(
        "/api/v1/tasks/",
        {"compute_resource": resource.name, "command": "eval", "gpus": gpus, **extra},
        format="json",
    )


def test_an_agent_token_authenticates_as_its_owner(estate):
    answer = bearer(estate.token).get("/api/v1/me/")
    assert answer.status_code == 200 and answer.json()["username"] == "vera"
    token = ApiToken.objects.get(agent=estate.agent)
    assert token.user == estate.owner and token.prefix and token.token_hash != estate.token


def test_tasks_and_sessions_submitted_with_an_agent_token_carry_the_agent(estate):
    answer = submit(bearer(estate.token), estate.resource)
    assert answer.status_code == 201, answer.json()
    task = Task.objects.get(pk=answer.json()["id"])
    assert (task.user, task.agent) == (estate.owner, estate.agent)
    assert answer.json()["agent"] == "eval-bot"
    bulk = bearer(estate.token).post(
        "/api/v1/tasks/bulk/",
        {"tasks": [{"compute_resource": estate.resource.name, "command": f"e{i}"} for i in range(2)]},
        format="json",
    )
    assert bulk.status_code == 201
    assert set(
        Task.objects.filter(pk__in=[t["id"] for t in bulk.json()]).values_list("agent", flat=True)
    ) == {estate.agent.pk}
    own = submit(client_for(estate.owner), estate.resource)
    assert Task.objects.get(pk=own.json()["id"]).agent is None


def test_the_ledger_records_the_agent_of_its_work(estate):
    submit(bearer(estate.token), estate.resource)
    engine.run_pass()
    interval = UsageInterval.objects.get()
    assert (interval.user, interval.agent) == (estate.owner, estate.agent)


def test_the_kill_switch_stops_the_work_and_refuses_the_token(estate):
    client = bearer(estate.token)
    running = submit(client, estate.resource, gpus=2).json()["id"]
    engine.run_pass()
    queued = submit(client, estate.resource, gpus=4).json()["id"]
    own = submit(client_for(estate.owner), estate.resource).json()["id"]
    assert Task.objects.get(pk=running).state == Task.State.PLACED
    answer = client_for(estate.owner).post(f"/api/v1/agents/{estate.agent.pk}/kill/")
    assert answer.status_code == 200 and answer.json()["stopped_at"]
    states = dict(Task.objects.values_list("pk", "state"))
    assert states[running] == Task.State.CANCELED and states[queued] == Task.State.CANCELED
    assert states[own] != Task.State.CANCELED  # the owner's own work goes on
    refused = client.get("/api/v1/me/")
    assert refused.status_code == 401
    assert ApiToken.objects.get(agent=estate.agent).revoked_at is not None
    # idempotent: a second kill changes nothing and keeps the first stop's time
    stopped_at = estate.agent.__class__.objects.get(pk=estate.agent.pk).stopped_at
    agents.kill_agent(estate.agent, actor=estate.lead, at=timezone.now() + timedelta(hours=1))
    assert estate.agent.__class__.objects.get(pk=estate.agent.pk).stopped_at == stopped_at


def test_a_lead_killing_an_agent_notifies_its_owner(estate):
    agents.kill_agent(estate.agent, actor=estate.lead)
    notice = Notification.objects.get(user=estate.owner, kind=Notification.Kind.AGENT_STOPPED)
    assert "lena" in notice.message


def test_a_stopped_agent_submits_nothing_even_with_a_token_it_kept(estate):
    agents.kill_agent(estate.agent, actor=estate.owner)
    ApiToken.objects.filter(agent=estate.agent).update(revoked_at=None)  # a token somehow not revoked
    answer = submit(bearer(estate.token), estate.resource)
    assert answer.status_code == 401 and "stopped" in answer.json()["detail"]


def test_an_agent_token_creates_no_schedules_and_manages_no_agents(estate):
    client = bearer(estate.token)
    schedule = client.post(
        "/api/v1/schedules/",
        {"name": "n", "cron": "0 2 * * *", "compute_resource": estate.resource.name, "command": "x"},
        format="json",
    )
    assert schedule.status_code == 403 and "agent" in schedule.json()["detail"]
    assert client.get("/api/v1/agents/").status_code == 403
    assert client.post(f"/api/v1/agents/{estate.agent.pk}/kill/").status_code == 403
