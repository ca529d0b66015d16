"""Enrolment: IT's per-pool enrolment token (shown once, stored hashed) is exchanged for a
worker token; the worker endpoints take only worker tokens, and only for their own pool."""

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.accounts.services import hash_token
from apps.pools import services
from apps.pools.models import EnrolmentToken, Worker
from apps.tasks.models import Task
from apps.workers import services as protocol
from tests.factories import GroupFactory, UserFactory
from tests.pools.conftest import bearer

pytestmark = pytest.mark.django_db

ENROL = "/api/v1/workers/enrol"


def test_an_enrolment_token_is_exchanged_for_a_worker_token_of_its_pool(pool, enrolment):
    token, raw = enrolment
    answer = bearer(raw).post(ENROL, {"hostname": "gpu-01", "gpus": "8", "mode": "process"}, format="json")
    assert answer.status_code == 201, answer.content
    body = answer.json()
    worker = Worker.objects.get(pk=body["worker"])
    assert (worker.pool, worker.hostname, worker.gpus, worker.mode) == (pool, "gpu-01", 8, "process")
    assert body["token"].startswith("kqw_") and worker.token_hash == hash_token(body["token"])
    assert body["heartbeat_s"] == 5 and body["heartbeat_timeout_s"] == 30
    token.refresh_from_db()
    assert token.last_used_at is not None and worker.enrolment_token == token


def test_only_a_hash_of_the_enrolment_token_is_stored(enrolment):
    token, raw = enrolment
    assert token.token_hash == hash_token(raw) and raw not in token.prefix + token.token_hash
    assert raw.startswith(token.prefix) and len(raw) > 40


@pytest.mark.parametrize(
    "header",
    [
        None,
        "Bearer",
        "Bearer kqe_not-a-real-token",
        "Bearer kqp_a-personal-token",
        "Basic dXNlcjpwdw==",
        "Bearer a b",
    ],
)
def test_enrolment_without_a_valid_enrolment_token_is_401(header):
    client = APIClient()
    if header:
        client.credentials(HTTP_AUTHORIZATION=header)
    answer = client.post(ENROL, {"hostname": "gpu-01", "gpus": "8"}, format="json")
    assert answer.status_code == 401
    assert answer["WWW-Authenticate"].startswith("Bearer")


def test_revoked_and_expired_enrolment_tokens_are_refused(pool, enrolment):
    token, raw = enrolment
    services.revoke_enrolment_token(token, timezone.now())
    assert bearer(raw).post(ENROL, {"hostname": "a", "gpus": "1"}, format="json").status_code == 401
    expiring = EnrolmentToken(pool=pool, name="short", expires_at=timezone.now() + timedelta(seconds=1))
    raw = services.issue_enrolment_token(expiring, now=timezone.now())
    EnrolmentToken.objects.filter(pk=expiring.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert bearer(raw).post(ENROL, {"hostname": "a", "gpus": "1"}, format="json").status_code == 401


@pytest.mark.parametrize(
    "body, field",
    [
        ({"gpus": "8"}, "hostname"),
        ({"hostname": "", "gpus": "8"}, "hostname"),
        ({"hostname": "a"}, "gpus"),
        ({"hostname": "a", "gpus": "-1"}, "gpus"),
        ({"hostname": "a", "gpus": "1.2345"}, "gpus"),
        ({"hostname": "a", "gpus": "many"}, "gpus"),
        ({"hostname": "a", "gpus": "1", "mode": "podman"}, "mode"),
        ({"hostname": "a" * 256, "gpus": "1"}, "hostname"),
    ],
)
def test_bad_enrolment_input_is_400_naming_the_field(enrolment, body, field):
    answer = bearer(enrolment[1]).post(ENROL, body, format="json")
    assert answer.status_code == 400 and field in answer.json()


@pytest.mark.parametrize(
    "hostname, reason",
    [
        ("gpu\u202e10", "letters, digits and hyphens"),  # right-to-left override
        ("gpu 01", "letters, digits and hyphens"),
        ("gpu_01", "letters, digits and hyphens"),
        ("gpü-01", "letters, digits and hyphens"),
        ("-gpu", "start and end with a letter or digit"),
        ("gpu-", "start and end with a letter or digit"),
        ("gpu..01", "empty label"),
        (".gpu", "empty label"),
        ("a" * 64 + ".example", "at most 63 characters"),
        (".".join(["a" * 63] * 4), "at most 253 characters"),
        (7, "Not a valid string"),
    ],
)
def test_a_hostname_must_be_an_rfc_1123_host_name_or_it_is_400_naming_the_field_and_the_reason(
    enrolment, hostname, reason
):
    answer = bearer(enrolment[1]).post(ENROL, {"hostname": hostname, "gpus": "1"}, format="json")
    assert answer.status_code == 400, answer.content
    assert reason in " ".join(answer.json()["hostname"])
    assert not Worker.objects.exists()


@pytest.mark.parametrize(
    "hostname", ["gpu-01", "GPU-01.dc1.example.com", "10-0-0-7", "a", "node-1.", "a" * 63]
)
def test_an_rfc_1123_host_name_enrols(enrolment, hostname):
    answer = bearer(enrolment[1]).post(ENROL, {"hostname": hostname, "gpus": "1"}, format="json")
    assert answer.status_code == 201, answer.content


def test_malformed_json_is_400(enrolment):
    answer = bearer(enrolment[1]).post(ENROL, "{not json", content_type="application/json")
    assert answer.status_code == 400


def test_enrolling_again_from_the_same_host_replaces_the_old_worker_and_requeues_its_work(pool, enrol, place):
    old, old_client = enrol("gpu-01")
    (task,) = place(pool)
    protocol.claim(old, free=[1000] * 4, free_gpus=None, max_tasks=1, now=timezone.now())
    new, _ = enrol("gpu-01")
    old.refresh_from_db()
    task.refresh_from_db()
    assert old.state == Worker.State.RETIRED and new.state == Worker.State.ACTIVE
    assert task.state == Task.State.QUEUED and task.last_preemption_reason == "worker_lost"
    assert old_client.post("/api/v1/workers/heartbeat", {}, format="json").status_code == 401


def test_the_worker_endpoints_refuse_enrolment_and_personal_tokens(enrolment):
    _, raw = enrolment
    assert bearer(raw).post("/api/v1/workers/heartbeat", {}, format="json").status_code == 401
    user = UserFactory()
    _, personal = accounts.create_api_token(user=user, name="laptop")
    assert (
        bearer(personal).post("/api/v1/workers/claim", {"free_gpus": "1"}, format="json").status_code == 401
    )
    assert bearer("kqw_unknown").post("/api/v1/workers/heartbeat", {}, format="json").status_code == 401


def test_a_worker_token_is_refused_by_the_other_apis(enrol):
    _, client = enrol()
    assert client.get("/api/v1/me/").status_code in (401, 403)


def test_a_retired_worker_token_stops_working(enrol):
    worker, client = enrol()
    protocol.retire(worker, timezone.now())
    assert client.post("/api/v1/workers/heartbeat", {}, format="json").status_code == 401


def test_the_create_enrolment_token_command_prints_a_working_token(pool, capsys):
    from django.core.management import call_command

    call_command("create_enrolment_token", pool.name, "--name", "login nodes")
    raw = capsys.readouterr().out.strip()
    assert EnrolmentToken.objects.get(token_hash=hash_token(raw)).name == "login nodes"


@pytest.fixture
def it_admin(client):
    user = UserFactory(username="it-admin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN)
    client.force_login(user)
    return user


def test_it_creates_an_enrolment_token_in_the_admin_and_sees_it_once(client, it_admin, pool):
    answer = client.post(reverse("admin:pools_enrolmenttoken_add"), {"pool": pool.pk, "name": "rack 7"})
    assert answer.status_code == 200
    token = EnrolmentToken.objects.get(name="rack 7")
    raw = answer.context["raw"]
    assert token.token_hash == hash_token(raw) and raw in answer.content.decode()
    assert token.created_by == it_admin
    page = client.get(reverse("admin:pools_enrolmenttoken_change", args=[token.pk])).content.decode()
    assert raw not in page and token.prefix in page


def test_it_revokes_tokens_and_retires_workers_in_the_admin(client, it_admin, enrolment, enrol, pool, place):
    token, _ = enrolment
    worker, _ = enrol()
    (task,) = place(pool)
    protocol.claim(worker, free=[1000], free_gpus=None, max_tasks=1, now=timezone.now())
    changelist = reverse("admin:pools_enrolmenttoken_changelist")
    client.post(changelist, {"action": "revoke", "_selected_action": [token.pk]})
    token.refresh_from_db()
    assert token.revoked_at is not None
    client.post(
        reverse("admin:pools_worker_changelist"), {"action": "retire", "_selected_action": [worker.pk]}
    )
    worker.refresh_from_db()
    task.refresh_from_db()
    assert worker.state == Worker.State.RETIRED and task.state == Task.State.QUEUED
