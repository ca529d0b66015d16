"""/metrics serves HTTP request counts by view, method and status with a latency histogram, shared
by every web process through Redis, and the length of each routed Celery queue read from the Redis
broker at scrape time (docs/deploy.md, "Metrics"). The Redis tests use db 14 of REDIS_URL's
server (14 + 16 x N under pytest-xdist worker N), emptied before and after."""

import os

import pytest
import redis
from django.conf import settings as django_settings
from prometheus_client.parser import text_string_to_metric_families

from apps.core import http_metrics
from apps.engine.metrics import PRIORITY_SEPARATOR, celery_queues

TOKEN = "scrape-secret"


def scrape(client, settings) -> dict[tuple, float]:
    settings.DEBUG, settings.METRICS_TOKEN = False, TOKEN
    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


def db14_url() -> str:
    """db 14 of REDIS_URL's server; under pytest-xdist worker N's 14 + 16 x N (klique/settings/test.py)."""
    base = django_settings.REDIS_URL or "redis://127.0.0.1:6379/0"
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    return f"{base.rsplit('/', 1)[0]}/{14 + 16 * index}"


@pytest.fixture
def redis14(settings):
    """REDIS_URL pointed at an empty db 14; the Celery broker too."""
    from tests.conftest import require_redis

    settings.REDIS_URL = db14_url()
    require_redis()
    settings.CELERY_BROKER_URL = settings.REDIS_URL
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    http_metrics.shared.down_until = 0.0
    yield client
    client.flushdb()
    client.close()


@pytest.fixture
def fresh_memory():
    http_metrics.memory.clear()
    yield
    http_metrics.memory.clear()


@pytest.mark.django_db
def test_requests_are_counted_by_view_method_and_status_with_their_latency(client, settings, fresh_memory):
    assert client.get("/accounts/login/").status_code == 200
    assert client.get("/accounts/login/").status_code == 200
    assert client.post("/api/v1/tasks/", {}).status_code in (401, 403)
    assert client.get("/no/such/page/").status_code == 404
    assert client.get("/healthz").status_code == 200  # a probe: not counted
    metrics = scrape(client, settings)
    login = (("method", "GET"), ("status", "200"), ("view", "account_login"))
    assert metrics[("klique_http_requests_total", login)] == 2
    tasks = [
        key for key in metrics if key[0] == "klique_http_requests_total" and ("method", "POST") in key[1]
    ]
    assert len(tasks) == 1 and dict(tasks[0][1])["status"] in ("401", "403")
    assert metrics[
        ("klique_http_requests_total", (("method", "GET"), ("status", "404"), ("view", "<unmatched>")))
    ]
    assert not any("healthz" in str(key) for key in metrics)
    series = (("method", "GET"), ("view", "account_login"))
    assert metrics[("klique_http_request_duration_seconds_count", series)] == 2
    assert metrics[("klique_http_request_duration_seconds_bucket", (("le", "+Inf"), *series))] == 2
    assert 0 < metrics[("klique_http_request_duration_seconds_sum", series)] < 60
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in metrics.items()
        if name == "klique_http_request_duration_seconds_bucket" and dict(labels)["view"] == "account_login"
    )
    assert [value for _, value in buckets] == sorted(value for _, value in buckets)  # cumulative
    # The scrape itself is counted by the next one.
    again = scrape(client, settings)
    metrics_view = (("method", "GET"), ("status", "200"), ("view", "metrics"))
    assert again[("klique_http_requests_total", metrics_view)] >= 1


def test_a_slow_request_lands_in_its_bucket(fresh_memory, settings):
    http_metrics.record("workers-wait", "POST", 200, 20.0)
    http_metrics.record("workers-wait", "BREW", 200, 0.001)
    families = {f.name: f for f in http_metrics.HttpCollector().collect()}
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for s in families["klique_http_request_duration_seconds"].samples
    }
    post = (("method", "POST"), ("view", "workers-wait"))
    assert samples[("klique_http_request_duration_seconds_bucket", (("le", "10.0"), *post))] == 0
    assert samples[("klique_http_request_duration_seconds_bucket", (("le", "30.0"), *post))] == 1
    assert (
        "klique_http_request_duration_seconds_count",
        (("method", "OTHER"), ("view", "workers-wait")),
    ) in samples


@pytest.mark.django_db
@pytest.mark.redis
def test_every_web_process_counts_into_redis_and_any_answers_the_scrape(
    client, settings, redis14, fresh_memory
):
    settings.HTTP_METRICS = ""  # the default: Redis, since REDIS_URL is set
    assert client.get("/accounts/login/").status_code == 200
    # Another web process's request: the same Redis hashes.
    http_metrics.RedisStore().add([(http_metrics.REQUESTS, "account_login\tGET\t200", 1)])
    assert http_metrics.memory.read()[http_metrics.REQUESTS] == {}
    assert redis14.hget(http_metrics.REQUESTS, "account_login\tGET\t200") == b"2"
    metrics = scrape(client, settings)
    assert (
        metrics[
            ("klique_http_requests_total", (("method", "GET"), ("status", "200"), ("view", "account_login")))
        ]
        == 2
    )


@pytest.mark.django_db
def test_redis_down_never_fails_a_request(client, settings, fresh_memory):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    settings.HTTP_METRICS = "redis"
    http_metrics.shared.down_until = 0.0
    try:
        assert client.get("/accounts/login/").status_code == 200
        assert client.get("/accounts/login/").status_code == 200
    finally:
        http_metrics.shared.down_until = 0.0


def test_the_routed_queues_are_all_known():
    assert celery_queues() == ["autoscale", "celery", "engine", "meter", "sweep", "whatif"]


@pytest.mark.django_db
@pytest.mark.redis
def test_the_queue_length_reflects_messages_pushed_to_the_broker(client, settings, redis14):
    metrics = scrape(client, settings)
    for queue in celery_queues():
        assert metrics[("klique_celery_queue_length", (("queue", queue),))] == 0
    from klique.celery import app

    with app.connection_for_write(settings.CELERY_BROKER_URL) as connection:
        for _ in range(3):
            app.send_task("klique.engine.run_pass", queue="engine", connection=connection)
        app.send_task("klique.whatif.run", args=[1], connection=connection)  # routed to "whatif"
        app.send_task("klique.ledger.rollup", queue="celery", priority=6, connection=connection)
    assert redis14.llen("engine") == 3
    assert redis14.llen(f"celery{PRIORITY_SEPARATOR}6") == 1
    metrics = scrape(client, settings)
    assert metrics[("klique_celery_queue_length", (("queue", "engine"),))] == 3
    assert metrics[("klique_celery_queue_length", (("queue", "whatif"),))] == 1
    assert metrics[("klique_celery_queue_length", (("queue", "celery"),))] == 1
    assert metrics[("klique_celery_queue_length", (("queue", "meter"),))] == 0
    redis14.lpop("engine")
    assert scrape(client, settings)[("klique_celery_queue_length", (("queue", "engine"),))] == 2


@pytest.mark.django_db
def test_without_a_redis_broker_there_is_no_queue_metric(client, settings):
    settings.CELERY_BROKER_URL = "memory://"
    assert not any(name == "klique_celery_queue_length" for name, _ in scrape(client, settings))


def test_every_install_example_sets_metrics_token():
    from klique.settings.base import BASE_DIR

    assert "\nMETRICS_TOKEN=" in (BASE_DIR / "deploy/compose.env.example").read_text()
    assert "METRICS_TOKEN" in (BASE_DIR / "deploy/helm/klique/values.yaml").read_text()
    deploy = (BASE_DIR / "docs/deploy.md").read_text()
    klique_env = deploy.split("cat > /etc/klique/klique.env <<ENV", 1)[1].split("\nENV\n", 1)[0]
    assert "\nMETRICS_TOKEN=" in klique_env
    assert "--from-literal=METRICS_TOKEN=" in deploy
