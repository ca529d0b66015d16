"""/healthz and /readyz for load balancers and Kubernetes probes: no login, no host check, no
HTTPS redirect; readiness asks the database and Redis when configured, reports the engine's last
pass, and fails on it only when asked (``?engine=1``): a stalled engine leaves the portal serving."""

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from apps.engine.models import PassRecord
from apps.engine.services import run_pass

pytestmark = pytest.mark.django_db

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def test_healthz_answers_without_the_database_login_or_a_known_host(client, django_assert_num_queries):
    with django_assert_num_queries(0):
        answer = client.get("/healthz", HTTP_HOST="10.1.2.3:8000")
    assert answer.status_code == 200 and answer.json() == {"status": "alive"}
    assert answer["Cache-Control"] == "no-store"


@override_settings(REDIS_URL="")
def test_readyz_is_ready_after_a_recent_engine_pass(client):
    run_pass()
    answer = client.get("/readyz", HTTP_HOST="10.1.2.3")
    body = answer.json()
    assert answer.status_code == 200, body
    assert body["status"] == "ready" and body["failed"] == []
    assert body["checks"]["database"] == {"ok": True}
    assert body["checks"]["engine"]["ok"] and body["checks"]["engine"]["last_pass_age_s"] < 60


@override_settings(REDIS_URL="", READY_MAX_PASS_AGE_S=60)
def test_readyz_is_503_naming_the_engine_when_its_last_pass_is_too_old(client):
    PassRecord.objects.create(started_at=timezone.now() - timedelta(minutes=5))
    PassRecord.objects.create(started_at=timezone.now(), skipped=True, skip_reason="locked")
    answer = client.get("/readyz?engine=1")
    body = answer.json()
    assert answer.status_code == 503
    assert body["failed"] == ["engine"] and body["checks"]["database"]["ok"]
    assert "began 300 s ago (limit 60 s)" in body["checks"]["engine"]["error"]


@override_settings(REDIS_URL="", READY_MAX_PASS_AGE_S=60)
def test_a_stalled_engine_leaves_the_web_process_ready_and_reports_the_age(client):
    PassRecord.objects.create(started_at=timezone.now() - timedelta(minutes=5))
    answer = client.get("/readyz")
    assert answer.status_code == 200
    assert answer.json()["checks"]["engine"] == {"ok": True, "last_pass_age_s": 300.0}


@override_settings(REDIS_URL="")
def test_readyz_for_the_engine_is_503_when_no_engine_pass_was_ever_recorded(client):
    assert client.get("/readyz").status_code == 200
    answer = client.get("/readyz?engine=1")
    assert answer.status_code == 503
    assert answer.json()["checks"]["engine"] == {"ok": False, "error": "no engine pass recorded"}


@override_settings(REDIS_URL="", READY_MAX_PASS_AGE_S=0)
def test_readyz_for_the_engine_with_no_age_limit_never_fails_on_the_engine(client):
    answer = client.get("/readyz?engine=1")
    assert answer.status_code == 200 and set(answer.json()["checks"]) == {"database", "engine"}


@override_settings(REDIS_URL=UNREACHABLE_REDIS)
def test_readyz_is_503_naming_redis_when_redis_is_unreachable(client):
    run_pass()
    answer = client.get("/readyz")
    body = answer.json()
    assert answer.status_code == 503
    assert body["failed"] == ["redis"]
    assert body["checks"]["redis"] == {"ok": False, "error": "ConnectionError"}  # no host in the answer
    assert body["checks"]["engine"]["ok"]


@pytest.mark.redis
def test_readyz_pings_redis_when_it_is_configured(client, settings):
    run_pass()
    body = client.get("/readyz").json()
    assert body["checks"]["redis"] == {"ok": True} and body["status"] == "ready"


@override_settings(SECURE_SSL_REDIRECT=True, ALLOWED_HOSTS=["klique.example.org"])
def test_the_probes_are_not_redirected_to_https_and_other_pages_are(client):
    assert client.get("/healthz", HTTP_HOST="10.1.2.3").status_code == 200
    assert client.get("/accounts/login/", HTTP_HOST="klique.example.org").status_code == 301
