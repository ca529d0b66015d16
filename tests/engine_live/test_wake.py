"""Passes on demand (apps.tasks.wake) against real PostgreSQL and Redis: a request wakes the
run_engine loop and queues a Celery pass; a request during a pass leads to one more; passes on
demand never overlap."""

import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection

from apps.engine import core, services, tasks
from apps.engine.lock import exclusive_pass
from apps.engine.models import PassRecord
from apps.tasks import wake
from tests.engine_live.test_pass import estate, submit

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres, pytest.mark.redis]


@pytest.fixture(autouse=True)
def clean_redis(settings):
    import redis

    redis.Redis.from_url(settings.REDIS_URL).flushdb()


def queued_passes() -> int:
    """The run_pass messages waiting on the Celery ``engine`` queue (a Redis list)."""
    import json

    client = wake._client()
    return sum(
        json.loads(raw)["headers"]["task"] == "klique.engine.run_pass"
        for raw in client.lrange("engine", 0, -1)
    )


def request_during_the_next_pass(monkeypatch):
    real_allocate = core.allocate

    def allocate(snapshot):
        wake._request_now()
        return real_allocate(snapshot)

    monkeypatch.setattr(core, "allocate", allocate)


def test_a_request_marks_a_pass_wanted_and_the_pass_clears_it():
    assert not wake.pass_wanted()
    wake.request_pass()
    assert wake.pass_wanted()
    services.run_pass()
    assert not wake.pass_wanted()


def test_a_request_during_a_pass_leaves_a_pass_wanted(monkeypatch):
    request_during_the_next_pass(monkeypatch)
    services.run_pass()
    assert wake.pass_wanted()


def test_a_request_inside_a_transaction_counts_only_once_it_commits():
    from django.db import transaction

    with transaction.atomic():
        wake.request_pass()
        assert not wake.pass_wanted()
    assert wake.pass_wanted()


def test_requests_queue_one_celery_pass_however_many_arrive():
    for _ in range(5):
        wake.request_pass()
    assert queued_passes() == 1


def test_the_celery_pass_queues_one_more_when_a_request_came_during_it(monkeypatch):
    wake.request_pass()
    assert queued_passes() == 1
    tasks.run_pass()
    assert queued_passes() == 1  # nothing more: no request came during the pass
    request_during_the_next_pass(monkeypatch)
    tasks.run_pass()
    assert queued_passes() == 2
    assert PassRecord.objects.filter(skipped=False).count() == 2


def test_a_celery_pass_that_finds_the_lock_taken_keeps_the_request_and_queues_a_retry():
    held, release = threading.Event(), threading.Event()

    def hold():
        try:
            with exclusive_pass():
                held.set()
                release.wait(20)
        finally:
            connection.close()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(20)
        wake.request_pass()
        before = queued_passes()
        tasks.run_pass()
        assert PassRecord.objects.get().skip_reason == "another pass running"
        assert wake.pass_wanted()
        assert queued_passes() == before + 1
    finally:
        release.set()
        holder.join(20)


def test_passes_on_demand_from_many_threads_never_overlap(monkeypatch):
    pool, ra, _ = estate()
    submit(ra, 4)
    real_allocate = core.allocate

    def slow_allocate(snapshot):
        time.sleep(0.05)
        return real_allocate(snapshot)

    monkeypatch.setattr(core, "allocate", slow_allocate)

    def requester():
        try:
            for _ in range(5):
                wake.request_pass()
                tasks.run_pass()
        finally:
            connection.close()

    threads = [threading.Thread(target=requester) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    ran = list(PassRecord.objects.filter(skipped=False).order_by("started_at"))
    assert ran
    for earlier, later in zip(ran, ran[1:], strict=False):
        assert earlier.started_at.timestamp() + earlier.duration_ms / 1000 <= later.started_at.timestamp()


def test_the_run_engine_loop_runs_a_pass_on_request_long_before_its_interval():
    finished = threading.Event()

    def engine():
        try:
            call_command("run_engine", "--interval", "300", "--passes", "2")
        finally:
            finished.set()
            connection.close()

    thread = threading.Thread(target=engine, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not PassRecord.objects.exists():
        assert time.monotonic() < deadline, "the loop's first pass never ran"
        time.sleep(0.05)
    assert PassRecord.objects.count() == 1
    wake.request_pass()
    # The second pass can only come from the request: the interval is five minutes.
    assert finished.wait(60), "the request did not lead to a pass"
    assert PassRecord.objects.filter(skipped=False).count() == 2
