"""The schedule API: create, list, change, pause, delete; only the owner changes a schedule."""

import pytest

from apps.tasks.models import Schedule
from tests.factories import MembershipFactory, UserFactory

pytestmark = pytest.mark.django_db
BODY = {
    "name": "nightly",
    "cron": "0 2 * * *",
    "compute_resource": "vision/a100-any",
    "command": "train",
    "gpus": "2",
}


def test_a_member_creates_a_schedule_on_their_groups_resource(estate, api):
    response = api(estate.member).post("/api/v1/schedules/", {**BODY, "project": "detector"}, format="json")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["owner"] == "vera" and body["active"] is True and body["next_run_at"].endswith("T02:00:00Z")
    assert body["project"] == "detector" and body["gpus"] == "2.000" and body["runs"] == []
    assert Schedule.objects.get().owner == estate.member


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"cron": "every night"}, "cron"),
        ({"gpus": "9"}, "gpus"),
        ({"compute_resource": "nope"}, "compute_resource"),
        ({"project": "nope"}, "project"),
        ({"command": ""}, "command"),
    ],
)
def test_a_bad_schedule_answers_400_naming_the_field(estate, api, change, field):
    response = api(estate.member).post("/api/v1/schedules/", {**BODY, **change}, format="json")
    assert response.status_code == 400 and field in response.json(), response.json()


def test_a_schedule_on_a_resource_of_a_group_one_is_not_in_is_forbidden(estate, api):
    response = api(estate.it).post(
        "/api/v1/schedules/", {**BODY, "compute_resource": "speech/a100"}, format="json"
    )
    assert response.status_code == 403


def test_the_owner_pauses_changes_and_deletes_a_schedule(estate, api):
    client = api(estate.member)
    pk = client.post("/api/v1/schedules/", BODY, format="json").json()["id"]
    paused = client.patch(f"/api/v1/schedules/{pk}/", {"active": False}, format="json").json()
    assert paused["active"] is False and paused["next_run_at"] is None
    changed = client.patch(f"/api/v1/schedules/{pk}/", {"active": True, "cron": "30 * * * *"}, format="json")
    assert changed.status_code == 200 and changed.json()["next_run_at"][14:19] == "30:00"
    bad = client.patch(f"/api/v1/schedules/{pk}/", {"cron": "nope"}, format="json")
    assert bad.status_code == 400 and "cron" in bad.json()
    assert client.delete(f"/api/v1/schedules/{pk}/").status_code == 204
    assert not Schedule.objects.exists()


def test_others_see_a_schedule_by_role_and_only_the_owner_changes_it(estate, api):
    pk = api(estate.member).post("/api/v1/schedules/", BODY, format="json").json()["id"]
    assert api(estate.other_member).get(f"/api/v1/schedules/{pk}/").status_code == 404
    assert api(estate.other_member).delete(f"/api/v1/schedules/{pk}/").status_code == 404
    assert api(estate.lead).get("/api/v1/schedules/").json()["count"] == 0
    it = api(estate.it)
    assert it.get(f"/api/v1/schedules/{pk}/").status_code == 200
    assert it.patch(f"/api/v1/schedules/{pk}/", {"active": False}, format="json").status_code == 403
    assert it.delete(f"/api/v1/schedules/{pk}/").status_code == 403


def test_put_is_not_offered(estate, api):
    pk = api(estate.member).post("/api/v1/schedules/", BODY, format="json").json()["id"]
    assert api(estate.member).put(f"/api/v1/schedules/{pk}/", BODY, format="json").status_code == 405


def test_a_team_lead_sees_their_own_groups_schedules_but_only_the_owner_changes_them(estate, api):
    speech = estate.speech_a100.policy.group
    sara = MembershipFactory(group=speech, user=UserFactory(username="sara")).user
    theirs = api(sara).post(
        "/api/v1/schedules/", {**BODY, "compute_resource": "speech/a100", "gpus": None}, format="json"
    )
    assert theirs.status_code == 201, theirs.json()
    vision = api(estate.member).post("/api/v1/schedules/", BODY, format="json").json()["id"]
    lead = api(estate.lead)
    listed = lead.get("/api/v1/schedules/").json()
    assert [(s["id"], s["owner"]) for s in listed["results"]] == [(theirs.json()["id"], "sara")]
    detail = lead.get(f"/api/v1/schedules/{theirs.json()['id']}/")
    assert detail.status_code == 200 and detail.json()["compute_resource"] == "speech/a100"
    assert lead.get(f"/api/v1/schedules/{vision}/").status_code == 404
    pk = theirs.json()["id"]
    assert lead.patch(f"/api/v1/schedules/{pk}/", {"active": False}, format="json").status_code == 403
    assert lead.delete(f"/api/v1/schedules/{pk}/").status_code == 403
