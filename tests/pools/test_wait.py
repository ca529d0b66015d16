"""POST /api/v1/workers/wait: a daemon with room waits for placed work in its pool instead of
polling claim. Against real PostgreSQL; the wake-ups against real Redis."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.utils import timezone

from apps.engine import services as engine
from apps.policies import services as policies
from apps.pools.models import Worker
from apps.tasks import services as lifecycle
from apps.tasks import wake
from apps.workers import services as protocol
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory
from tests.pools.conftest import sweep_steadily

WAIT = "/api/v1/workers/wait"


def lose(worker):
    Worker.objects.filter(pk=worker.pk).update(last_heartbeat=timezone.now() - timedelta(minutes=5))
    sweep_steadily(timezone.now() - timedelta(minutes=1), timezone.now())


@pytest.mark.django_db
def test_wait_answers_at_once_when_the_pool_has_claimable_work(pool, enrol, place):
    _, client = enrol()
    place(pool)
    answer = client.post(WAIT, {"timeout_s": 20}, format="json")
    assert answer.status_code == 200 and answer.json() == {"placed": True}


@pytest.mark.django_db
def test_claimed_work_is_not_claimable_so_wait_runs_to_its_timeout(pool, enrol, place):
    worker, client = enrol()
    place(pool)
    protocol.claim(worker, free=[1000], free_gpus=None, max_tasks=1, now=timezone.now())
    assert client.post(WAIT, {"timeout_s": 0.3}, format="json").json() == {"placed": False}


@pytest.mark.django_db
def test_another_pools_work_does_not_end_the_wait(pool, enrol, place):
    _, client = enrol()
    place(PoolFactory(name="cloud"))
    assert client.post(WAIT, {"timeout_s": 0.3}, format="json").json() == {"placed": False}


@pytest.mark.django_db
def test_without_redis_wait_polls_the_database(pool, enrol, place, settings):
    settings.REDIS_URL = ""
    _, client = enrol()
    assert client.post(WAIT, {"timeout_s": 0.3}, format="json").json() == {"placed": False}
    place(pool)
    assert client.post(WAIT, {"timeout_s": 20}, format="json").json() == {"placed": True}


@pytest.mark.django_db
def test_a_zero_ceiling_turns_waiting_off(enrol, settings):
    settings.WORKER_WAIT_MAX_S = 0
    _, client = enrol()
    answer = client.post(WAIT, {"timeout_s": 600}, format="json")
    assert answer.status_code == 200 and answer.json() == {"placed": False}


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {},
        {"timeout_s": 0},
        {"timeout_s": -1},
        {"timeout_s": 21},
        {"timeout_s": "x"},
        {"timeout_s": "5"},  # a number is a JSON number
        {"timeout_s": True},  # a boolean is not a number (it was read as 1 second)
        {"timeout_s": False},
        {"timeout_s": None},
    ],
)
def test_bad_waits_are_400_naming_the_field(enrol, body):
    _, client = enrol()
    answer = client.post(WAIT, body, format="json")
    assert answer.status_code == 400 and "timeout_s" in answer.json()


@pytest.mark.django_db
def test_a_lost_worker_waits_no_more_until_it_heartbeats(enrol):
    worker, client = enrol()
    lose(worker)
    assert client.post(WAIT, {"timeout_s": 1}, format="json").status_code == 409


@pytest.mark.django_db
def test_a_retired_worker_is_401(enrol):
    worker, client = enrol()
    protocol.retire(worker, timezone.now())
    assert client.post(WAIT, {"timeout_s": 1}, format="json").status_code == 401


@pytest.mark.django_db
def test_a_worker_token_is_needed():
    from rest_framework.test import APIClient

    assert APIClient().post(WAIT, {"timeout_s": 1}, format="json").status_code == 401


def waiting(count: int) -> None:
    deadline = time.monotonic() + 10
    while wake._hub().waiters < count:
        assert time.monotonic() < deadline, "the waiters never started waiting"
        time.sleep(0.01)


def in_thread(results: dict, key, call):
    def run():
        try:
            results[key] = call()
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_a_notify_wakes_the_waiters_of_its_pool_and_not_another_pools():
    first, second = PoolFactory(name="first"), PoolFactory(name="second")
    results: dict = {}
    threads = [
        in_thread(results, "first", lambda: wake.wait_placed(first.pk, 30)),
        in_thread(results, "second", lambda: wake.wait_placed(second.pk, 2)),
    ]
    waiting(2)
    wake.notify_placed([first.pk])
    threads[0].join(20)
    assert results.get("first") is True
    threads[1].join(20)
    assert results.get("second") is False


@pytest.mark.django_db(transaction=True)
@pytest.mark.redis
def test_a_pass_that_places_work_wakes_the_daemon_waiting_on_its_pool(pool, enrol):
    _, client = enrol()
    profile = ProfileFactory(name="gpu-1", gpus=1)
    policies.link_pool(profile, pool)
    policy = policies.create_policy(group=GroupFactory(name="A", slug="a"), reservation=1, limit=4)
    resource = policies.connect(policy=policy, profile=profile)
    results: dict = {}
    thread = in_thread(results, "answer", lambda: client.post(WAIT, {"timeout_s": 20}, format="json").json())
    waiting(1)
    lifecycle.submit(user=UserFactory(), compute_resource=resource, command="train")
    assert engine.run_pass().placed == 1
    thread.join(20)
    assert results.get("answer") == {"placed": True}


def backend_pid(conn) -> int | None:
    """The PostgreSQL backend a thread's connection holds, None when it holds none."""
    return None if conn.connection is None else conn.connection.info.backend_pid


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
@pytest.mark.redis
def test_a_waiting_request_holds_no_database_connection():
    """The request's thread has used the database (as a request does before it waits); while it
    waits its connection is closed and its backend is gone from PostgreSQL. Checked on that
    thread's own connection, not by counting backends, which other processes may open."""
    pool = PoolFactory(name="quiet")
    results: dict = {}

    def request():
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        own = connections[DEFAULT_DB_ALIAS]  # this thread's wrapper, not the thread-local proxy
        results["connection"], results["pid"] = own, backend_pid(own)
        return wake.wait_placed(pool.pk, 2)

    thread = in_thread(results, "answer", request)
    waiting(1)
    assert results["pid"] is not None
    assert backend_pid(results["connection"]) is None
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", [results["pid"]])
        assert cursor.fetchone()[0] == 0
    thread.join(20)
    assert results.get("answer") is False
