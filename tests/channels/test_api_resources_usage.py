"""Compute resources one may submit to, and the use and budgets of one's groups."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.tasks import services
from apps.tasks.models import Task

pytestmark = pytest.mark.django_db


def test_a_member_lists_only_their_groups_compute_resources(estate, api):
    services.submit(user=estate.member, compute_resource=estate.vision_a100, command="x")
    body = api(estate.member).get("/api/v1/compute-resources/").json()
    by_name = {r["name"]: r for r in body["results"]}
    assert set(by_name) == {"vision/a100", "vision/a100-any", "vision/a100-quarter"}
    assert by_name["vision/a100"]["waiting"] == 1 and by_name["vision/a100"]["running"] == 0
    quarter = by_name["vision/a100-quarter"]
    assert (quarter["gpus"], quarter["time_weight"], quarter["limit"]) == ("0.250", "0.500", "4.000")
    assert by_name["vision/a100-any"]["size_from_task"] is True


def test_a_compute_resource_shows_its_sharing_and_priority_settings(estate, api):
    resource = estate.vision_a100
    resource.profile.default_priority, resource.profile.max_priority = 100, 200
    resource.profile.save()
    resource.max_priority = 150
    resource.save()
    policy = resource.policy
    policy.over_quota_weight, policy.lendable = Decimal("2.5"), Decimal("1")
    policy.save()
    got = api(estate.member).get(f"/api/v1/compute-resources/{resource.pk}/").json()
    assert (got["lending"], got["over_quota_weight"], got["lendable"]) == ("priority", "2.500", "1.000")
    assert (got["default_priority"], got["max_priority"], got["starvation_s"]) == (100, 150, 600)


def test_another_groups_compute_resource_is_404(estate, api):
    assert api(estate.member).get(f"/api/v1/compute-resources/{estate.speech_a100.pk}/").status_code == 404
    assert api(estate.lead).get(f"/api/v1/compute-resources/{estate.speech_a100.pk}/").status_code == 200


def test_resources_filter_by_group_and_profile(estate, api):
    client = api(estate.member)
    assert client.get("/api/v1/compute-resources/?group=vision").json()["count"] == 3
    assert client.get("/api/v1/compute-resources/?group=speech").json()["count"] == 0
    assert [r["name"] for r in client.get("/api/v1/compute-resources/?profile=a100").json()["results"]] == [
        "vision/a100"
    ]


def place(task, pool, at):
    task = Task.objects.select_related("compute_resource__policy", "compute_resource__profile").get(
        pk=task.pk
    )
    services.place_many([(task, pool)], at)


def test_usage_shows_budget_used_left_burn_rate_run_out_and_reset(estate, api, time_machine):
    time_machine.move_to(datetime(2026, 12, 9, 12, 0, tzinfo=UTC))  # a Wednesday: 2 h of the week behind it
    now = timezone.now()
    task = services.submit(user=estate.member, compute_resource=estate.vision_a100, command="x")
    place(task, estate.pool, now - timedelta(hours=2))
    rows = api(estate.member).get("/api/v1/usage/").json()
    assert [r["group"]["slug"] for r in rows] == ["vision"]
    vision = rows[0]
    assert vision["has_budget"] is True and vision["period"] == "week"
    assert Decimal(vision["budget_hours"]) == 100
    assert Decimal("1.99") < Decimal(vision["used_hours"]) <= Decimal("2.01")
    assert Decimal(vision["left_hours"]) == 100 - Decimal(vision["used_hours"])
    assert Decimal(vision["burn_rate"]) == 1 and vision["gpus_in_use"] == "1.000"
    assert vision["projected_run_out"] is not None and vision["resets_at"] > vision["period_start"]
    assert vision["used_up"] is False and vision["over_threshold"] is False


def test_a_team_lead_sees_the_usage_of_their_group_and_it_sees_every_policy(estate, api):
    assert [r["group"]["slug"] for r in api(estate.lead).get("/api/v1/usage/").json()] == ["speech"]
    speech = api(estate.lead).get("/api/v1/usage/").json()[0]
    assert speech["has_budget"] is False and speech["left_hours"] is None
    slugs = {r["group"]["slug"] for r in api(estate.it).get("/api/v1/usage/").json()}
    assert slugs == {"acme", "research", "vision", "speech"}
    assert [r["group"]["slug"] for r in api(estate.it).get("/api/v1/usage/?group=speech").json()] == [
        "speech"
    ]


def test_a_person_without_groups_sees_no_resources_and_no_usage(estate, api):
    client = api(estate.outsider)
    assert client.get("/api/v1/compute-resources/").json()["count"] == 0
    assert client.get("/api/v1/usage/").json() == []
    assert client.get("/api/v1/tasks/").json()["count"] == 0
