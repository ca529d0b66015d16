"""The task API: submit, list, get, cancel; who may do what; bad input answers 400 naming the field."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.tasks import services
from apps.tasks.models import Task
from tests.channels.conftest import Role
from tests.factories import (
    ComputeResourceFactory,
    GroupFactory,
    MembershipFactory,
    PolicyFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def submit(client, resource="vision/a100", **body):
    return client.post(
        "/api/v1/tasks/", {"compute_resource": resource, "command": "python train.py", **body}, format="json"
    )


def test_a_member_submits_to_their_groups_resource_and_the_task_records_channel_and_user(estate, api):
    response = submit(api(estate.member, "cli"), name="first", project="detector", checkpoint=True)
    assert response.status_code == 201, response.json()
    body = response.json()
    task = Task.objects.get(pk=body["id"])
    assert (task.user, task.channel, task.project, task.checkpoint) == (
        estate.member,
        "cli",
        estate.project,
        True,
    )
    assert body["state"] == "queued" and body["queue_position"] == 1 and body["gpus"] == "1.000"
    assert body["compute_resource"] == "vision/a100" and body["group"] == "vision" and body["user"] == "vera"


def test_without_a_channel_header_the_channel_is_api(estate, api):
    assert submit(api(estate.member)).json()["channel"] == "api"


def test_an_unknown_channel_header_is_refused_naming_the_header(estate, api):
    response = submit(api(estate.member, "telepathy"))
    assert response.status_code == 400
    assert "X-Klique-Channel" in response.json()


@pytest.mark.parametrize(
    ("resource", "body", "field", "words"),
    [
        ("vision/a100-any", {"gpus": "-1"}, "gpus", "cannot be negative"),
        ("vision/a100", {"gpus": "0.5"}, "gpus", "fixed size"),
        ("vision/a100-any", {"gpus": "1.5"}, "gpus", "whole number"),
        ("vision/a100-any", {"gpus": "5"}, "gpus", "exceed the limit"),
        ("vision/a100-any", {"gpus": "0.0001"}, "gpus", "decimal places"),
        ("no/such-resource", {}, "compute_resource", "Unknown compute resource"),
        ("vision/a100", {"command": "  "}, "command", "blank"),
        ("vision/a100", {"project": "nope"}, "project", "No project"),
        ("vision/a100", {"spec": "not-an-object"}, "spec", "dictionary"),
    ],
)
def test_bad_input_answers_400_naming_the_field(estate, api, resource, body, field, words):
    response = submit(api(estate.member), resource, **body)
    assert response.status_code == 400
    errors = response.json()
    assert field in errors, errors
    assert any(words in message for message in errors[field]), errors


def test_a_size_from_the_task_is_used_when_the_profile_allows_it(estate, api):
    assert submit(api(estate.member), "vision/a100-any", gpus="3").json()["gpus"] == "3.000"


def test_a_member_cannot_submit_to_another_groups_resource_they_cannot_see(estate, api):
    response = submit(api(estate.member), "speech/a100")
    assert response.status_code == 400
    assert "Unknown compute resource" in response.json()["compute_resource"][0]


def test_submitting_to_a_visible_resource_of_a_group_one_is_not_in_is_forbidden(estate, api):
    response = submit(api(estate.it), "speech/a100")
    assert response.status_code == 403
    assert "groups you belong to" in response.json()["detail"]
    assert not Task.objects.exists()


def test_no_token_is_401_and_a_bad_token_is_401(estate, client):
    assert client.get("/api/v1/tasks/").status_code == 401
    response = client.get("/api/v1/tasks/", HTTP_AUTHORIZATION="Bearer kqp_not-a-real-token")
    assert response.status_code == 401
    assert response.json()["detail"] == "Unknown API token."


def make_task(user, resource, **kwargs):
    return services.submit(user=user, compute_resource=resource, command="run", **kwargs)


def test_a_member_sees_only_their_own_tasks(estate, api):
    mine = make_task(estate.member, estate.vision_a100)
    make_task(estate.other_member, estate.vision_a100)
    body = api(estate.member).get("/api/v1/tasks/").json()
    assert [t["id"] for t in body["results"]] == [mine.pk] and body["count"] == 1


def test_another_members_task_is_404_not_403(estate, api):
    theirs = make_task(estate.other_member, estate.vision_a100)
    client = api(estate.member)
    assert client.get(f"/api/v1/tasks/{theirs.pk}/").status_code == 404
    assert client.post(f"/api/v1/tasks/{theirs.pk}/cancel/").status_code == 404
    assert client.get("/api/v1/tasks/999999/").status_code == 404


def test_a_team_lead_sees_and_cancels_their_groups_tasks_only(estate, api):
    speech = make_task(estate.outsider, estate.speech_a100)
    vision = make_task(estate.member, estate.vision_a100)
    client = api(estate.lead)
    ids = {t["id"] for t in client.get("/api/v1/tasks/").json()["results"]}
    assert ids == {speech.pk}
    assert client.post(f"/api/v1/tasks/{speech.pk}/cancel/").json()["state"] == "canceled"
    assert client.get(f"/api/v1/tasks/{vision.pk}/").status_code == 404


def test_it_sees_all_tasks_and_finance_sees_them_but_may_not_cancel(estate, api):
    tasks = [make_task(estate.member, estate.vision_a100), make_task(estate.outsider, estate.speech_a100)]
    assert api(estate.it).get("/api/v1/tasks/").json()["count"] == 2
    finance = api(estate.finance)
    assert finance.get("/api/v1/tasks/").json()["count"] == 2
    assert finance.post(f"/api/v1/tasks/{tasks[0].pk}/cancel/").status_code == 403
    assert api(estate.it).post(f"/api/v1/tasks/{tasks[0].pk}/cancel/").status_code == 200


def test_the_owner_cancels_a_waiting_task_at_once_and_a_second_cancel_changes_nothing(estate, api):
    task = make_task(estate.member, estate.vision_a100)
    client = api(estate.member, "sdk")
    assert client.post(f"/api/v1/tasks/{task.pk}/cancel/").json()["state"] == "canceled"
    assert client.post(f"/api/v1/tasks/{task.pk}/cancel/").json()["state"] == "canceled"
    assert task.events.filter(kind="canceled", actor=estate.member).count() == 1


def test_a_task_shows_its_place_in_line_and_the_engines_verdict(estate, api):
    first, second = make_task(estate.member, estate.vision_a100), make_task(estate.member, estate.vision_a100)
    verdict = {"rule": "policy_limit", "message": "Vision uses 4 of its 4 GPU limit.", "used": "4"}
    Task.objects.filter(pk=second.pk).update(verdict=verdict)
    client = api(estate.member)
    detail = client.get(f"/api/v1/tasks/{second.pk}/").json()
    assert detail["queue_position"] == 2 and detail["verdict"] == verdict
    listed = {
        t["id"]: t["queue_position"] for t in client.get("/api/v1/tasks/?state=queued").json()["results"]
    }
    assert listed == {first.pk: 1, second.pk: 2}
    services.cancel(first, actor=estate.member)
    assert client.get(f"/api/v1/tasks/{second.pk}/").json()["queue_position"] == 1


def test_positions_in_a_filtered_page_count_the_whole_queue(estate, api):
    make_task(estate.other_member, estate.vision_a100)
    mine = make_task(estate.member, estate.vision_a100)
    body = api(estate.member).get("/api/v1/tasks/").json()
    assert [(t["id"], t["queue_position"]) for t in body["results"]] == [(mine.pk, 2)]


def test_preemption_history_lists_preemptions_and_requeues_with_reasons(estate, api):
    task = make_task(estate.member, estate.vision_a100)
    now = timezone.now()
    task = Task.objects.select_related("compute_resource__policy", "compute_resource__profile").get(
        pk=task.pk
    )
    services.place_many([(task, estate.pool)], now)
    task.refresh_from_db()
    services.request_stop_many([task], Task.StopReason.RECLAIM, now)
    detail = api(estate.member).get(f"/api/v1/tasks/{task.pk}/").json()
    assert detail["state"] == "queued" and detail["preemption_count"] == 1
    assert [(e["kind"], e["reason"], e["pool"]) for e in detail["preemptions"]] == [
        ("preempted", "reclaim", "onprem"),
        ("requeued", "reclaim", "onprem"),
    ]


def test_filters_narrow_the_list_and_bad_filter_values_answer_400(estate, api):
    make_task(estate.member, estate.vision_a100, channel="cli")
    make_task(estate.member, estate.vision_quarter)
    client = api(estate.member)
    assert client.get("/api/v1/tasks/?channel=cli").json()["count"] == 1
    assert client.get("/api/v1/tasks/?compute_resource=vision/a100-quarter").json()["count"] == 1
    assert client.get("/api/v1/tasks/?mine=true&limit=1").json()["count"] == 2
    assert len(client.get("/api/v1/tasks/?limit=1").json()["results"]) == 1
    response = client.get("/api/v1/tasks/?state=sleeping")
    assert response.status_code == 400 and "state" in response.json()


def test_fractions_stay_exact(estate, api):
    body = submit(api(estate.member), "vision/a100-quarter").json()
    assert body["gpus"] == "0.250" and Task.objects.get(pk=body["id"]).gpus == Decimal("0.25")


@pytest.mark.parametrize(
    "moment",
    ["5673-09-03T13:09:31.4-16:57", "9999-12-31T23:00:00-16:00", "0001-01-01T00:30:00+01:00", "yesterday"],
)
def test_time_filters_outside_what_the_database_takes_answer_400_or_match_nothing(estate, api, moment):
    response = api(estate.member).get("/api/v1/tasks/", {"submitted_after": moment})
    assert response.status_code in (200, 400)
    if response.status_code == 400:
        assert "submitted_after" in response.json()


def test_time_filters_compare_in_utc(estate, api):
    task = make_task(estate.member, estate.vision_a100)
    before = (task.submitted_at - timedelta(minutes=1)).astimezone(timezone.get_fixed_timezone(-16 * 60 - 57))
    client = api(estate.member)
    assert client.get("/api/v1/tasks/", {"submitted_after": before.isoformat()}).json()["count"] == 1
    assert client.get("/api/v1/tasks/", {"submitted_before": before.isoformat()}).json()["count"] == 0


def test_a_department_head_sees_and_cancels_the_tasks_of_their_departments_subtree(estate, api):
    research = estate.vision_a100.policy.group.parent
    head = MembershipFactory(
        group=research, role=Role.DEPARTMENT_HEAD, user=UserFactory(username="dana")
    ).user
    sales = GroupFactory(name="Sales", slug="sales", kind="department", parent=research.parent)
    sales_resource = ComputeResourceFactory(
        name="sales/a100",
        policy=PolicyFactory(group=sales, reservation=1, limit=2),
        profile=estate.vision_a100.profile,
    )
    seller = MembershipFactory(group=sales, user=UserFactory(username="sol")).user
    vision = make_task(estate.member, estate.vision_a100)
    speech = make_task(estate.lead, estate.speech_a100)
    other_department = make_task(seller, sales_resource)
    client = api(head)
    body = client.get("/api/v1/tasks/").json()
    assert {t["id"] for t in body["results"]} == {vision.pk, speech.pk} and body["count"] == 2
    assert client.get("/api/v1/tasks/", {"group": "vision"}).json()["count"] == 1
    assert client.get(f"/api/v1/tasks/{speech.pk}/").json()["user"] == "sam"
    assert client.get(f"/api/v1/tasks/{other_department.pk}/").status_code == 404
    assert client.post(f"/api/v1/tasks/{vision.pk}/cancel/").json()["state"] == "canceled"
    assert client.post(f"/api/v1/tasks/{other_department.pk}/cancel/").status_code == 404
    schedule = services.create_schedule(
        owner=estate.member, name="n", cron="0 2 * * *", compute_resource=estate.vision_a100, command="x"
    )
    assert [s["id"] for s in client.get("/api/v1/schedules/").json()["results"]] == [schedule.pk]
