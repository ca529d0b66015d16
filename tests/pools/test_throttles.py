"""Throttles (issue 11, defect 6): the worker endpoints per worker, enrolment per enrolment token and
personal token creation per person; past the rate the answer is 429 with Retry-After."""

import pytest
from django.core.cache import cache
from django.test import override_settings

from apps.accounts.models import ApiToken
from apps.core.throttles import ScopedThrottle
from klique.settings import base
from tests.factories import UserFactory
from tests.pools.conftest import bearer

pytestmark = pytest.mark.django_db

HEARTBEAT = {"tasks": [], "gpus": "4", "free_gpus": "4"}
LOW = {"worker": "3/min", "heartbeat": "3/min", "enrol": "2/min", "token": "2/hour"}
CLAIM = {"slots": ["1"], "max_tasks": 1}


@pytest.fixture(autouse=True)
def fresh_cache():
    cache.clear()
    yield
    cache.clear()


@override_settings(THROTTLE_RATES=LOW)
def test_a_worker_past_its_rate_is_answered_429_with_retry_after_and_others_are_not(enrol):
    _, first = enrol("node-1")
    _, second = enrol("node-2")
    answers = [first.post("/api/v1/workers/claim", CLAIM, format="json") for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 200]
    refused = first.post("/api/v1/workers/claim", CLAIM, format="json")
    assert refused.status_code == 429 and 0 < int(refused["Retry-After"]) <= 60
    assert second.post("/api/v1/workers/claim", CLAIM, format="json").status_code == 200


@override_settings(THROTTLE_RATES=LOW)
def test_heartbeats_are_counted_apart_so_a_busy_worker_is_never_declared_lost_for_its_claims(enrol):
    _, worker = enrol("node-1")
    for _ in range(4):
        worker.post("/api/v1/workers/claim", CLAIM, format="json")
    beats = [worker.post("/api/v1/workers/heartbeat", HEARTBEAT, format="json") for _ in range(4)]
    assert [b.status_code for b in beats] == [200, 200, 200, 429]


@override_settings(THROTTLE_RATES=LOW)
def test_enrolment_past_its_rate_is_answered_429(enrolment):
    _, raw = enrolment
    client = bearer(raw)
    body = {"hostname": "node", "gpus": "4", "mode": "process"}
    codes = [
        client.post("/api/v1/workers/enrol", body | {"hostname": f"n{i}"}, format="json") for i in range(3)
    ]
    assert [c.status_code for c in codes] == [201, 201, 429]
    assert int(codes[-1]["Retry-After"]) > 0


@override_settings(THROTTLE_RATES=LOW)
def test_personal_token_creation_past_its_rate_is_answered_429(client):
    user = UserFactory(username="maker")
    client.force_login(user)
    codes = [client.post("/account/tokens/", {"name": f"t{i}"}).status_code for i in range(3)]
    assert codes[:2] == [201, 201] and codes[2] == 429
    assert ApiToken.objects.filter(user=user).count() == 2


def test_the_default_worker_rate_leaves_room_for_a_daemon_at_the_default_heartbeat():
    """2,000 daemons each heartbeat every WORKER_HEARTBEAT_S and claim and report between beats: each
    is counted on its own, so the per-worker rate only needs many times one daemon's pace."""
    count, seconds = ScopedThrottle().parse_rate(base.THROTTLE_RATES["heartbeat"])
    assert count / seconds >= 10 / base.WORKER_HEARTBEAT_S
    count, seconds = ScopedThrottle().parse_rate(base.THROTTLE_RATES["worker"])
    assert count / seconds >= 10


UNREACHABLE_REDIS = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": "redis://127.0.0.1:9/0",
        "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5},
    }
}


def test_with_the_cache_unreachable_workers_are_answered_unthrottled_not_500(enrol):
    _, worker = enrol("node-1")
    with override_settings(THROTTLE_RATES=LOW, CACHES=UNREACHABLE_REDIS):
        answers = [worker.post("/api/v1/workers/heartbeat", HEARTBEAT, format="json") for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 200]
