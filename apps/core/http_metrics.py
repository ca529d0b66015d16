"""HTTP metrics: requests by view, method and status, and a latency histogram by view and method.

Every web process adds its requests to counters that all of them share, so any process answers a
scrape with the whole installation's numbers (as the database metrics of apps/engine/metrics.py
do): with ``REDIS_URL``, three hash increments in one pipeline per request (``HTTP_METRICS=redis``);
without it, this process's memory (``memory``, development); ``off`` records nothing. Labels are
bounded: the URL pattern's name (``<unmatched>`` for 404s outside any pattern), the method (others
as ``OTHER``) and the status code. Redis trouble never fails a request: the increments are dropped
for ``REDIS_RETRY_S`` and a warning is logged.
"""

import bisect
import logging
import threading
import time

from django.conf import settings
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily

log = logging.getLogger("klique.metrics")

# Seconds; the worker long poll (WORKER_WAIT_MAX_S, 20 s) lands in the 30 s bucket.
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
KEY = "klique:metrics:http:"
REQUESTS, LATENCY, SECONDS = KEY + "requests", KEY + "buckets", KEY + "seconds"
REDIS_TIMEOUT_S = 0.5
REDIS_RETRY_S = 30.0
SEP = "\t"


def mode() -> str:
    chosen = getattr(settings, "HTTP_METRICS", "")
    return chosen or ("redis" if settings.REDIS_URL else "memory")


class MemoryStore:
    """One process's counters (development, tests)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.hashes: dict[str, dict[str, float]] = {REQUESTS: {}, LATENCY: {}, SECONDS: {}}

    def add(self, increments: list[tuple[str, str, float]]) -> None:
        with self.lock:
            for name, field, amount in increments:
                self.hashes[name][field] = self.hashes[name].get(field, 0) + amount

    def read(self) -> dict[str, dict[str, float]]:
        with self.lock:
            return {name: dict(fields) for name, fields in self.hashes.items()}

    def clear(self) -> None:
        with self.lock:
            for fields in self.hashes.values():
                fields.clear()


class RedisStore:
    """Counters in Redis hashes, shared by every web process of the installation."""

    def __init__(self):
        self.clients: dict[str, object] = {}
        self.lock = threading.Lock()
        self.down_until = 0.0

    def client(self):
        import redis

        url = settings.REDIS_URL
        with self.lock:
            if url not in self.clients:
                self.clients[url] = redis.Redis.from_url(
                    url, socket_timeout=REDIS_TIMEOUT_S, socket_connect_timeout=REDIS_TIMEOUT_S
                )
            return self.clients[url]

    def add(self, increments: list[tuple[str, str, float]]) -> None:
        import redis

        if time.monotonic() < self.down_until:
            return
        try:
            pipe = self.client().pipeline(transaction=False)
            for name, field, amount in increments:
                if isinstance(amount, int):
                    pipe.hincrby(name, field, amount)
                else:
                    pipe.hincrbyfloat(name, field, amount)
            pipe.execute()
        except (redis.RedisError, OSError) as error:
            self.down_until = time.monotonic() + REDIS_RETRY_S
            log.warning("HTTP metrics not recorded for %.0f s: Redis failed: %s", REDIS_RETRY_S, error)

    def read(self) -> dict[str, dict[str, float]]:
        pipe = self.client().pipeline(transaction=False)
        for name in (REQUESTS, LATENCY, SECONDS):
            pipe.hgetall(name)
        answers = pipe.execute()
        return {
            name: {field.decode(): float(value) for field, value in answer.items()}
            for name, answer in zip((REQUESTS, LATENCY, SECONDS), answers, strict=True)
        }


memory = MemoryStore()
shared = RedisStore()


def store():
    return shared if mode() == "redis" else memory


def record(view: str, method: str, status: int, seconds: float) -> None:
    """Count one answered request."""
    method = method if method in METHODS else "OTHER"
    bucket = bisect.bisect_left(BUCKETS, seconds)  # len(BUCKETS): above the largest, +Inf only
    store().add(
        [
            (REQUESTS, SEP.join((view, method, str(status))), 1),
            (LATENCY, SEP.join((view, method, str(bucket))), 1),
            (SECONDS, SEP.join((view, method)), float(seconds)),
        ]
    )


def view_name(request) -> str:
    match = getattr(request, "resolver_match", None)
    if match is None:
        return "<unmatched>"
    return match.view_name or match.route or "<unnamed>"


class HttpMetricsMiddleware:
    """Times each request from just after the probes (apps.core.health) to its answer."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if mode() == "off":
            return self.get_response(request)
        started = time.perf_counter()
        response = self.get_response(request)
        try:
            record(
                view_name(request), request.method or "", response.status_code, time.perf_counter() - started
            )
        except Exception:  # counting must never fail an answer
            log.exception("could not record HTTP metrics")
        return response


class HttpCollector:
    """``klique_http_requests_total`` and ``klique_http_request_duration_seconds`` at scrape time."""

    def collect(self):
        requests = CounterMetricFamily(
            "klique_http_requests",
            "HTTP requests answered, by view (URL pattern name), method and status.",
            labels=["view", "method", "status"],
        )
        latency = HistogramMetricFamily(
            "klique_http_request_duration_seconds",
            "Time to answer HTTP requests, by view and method.",
            labels=["view", "method"],
        )
        if mode() == "off":
            return
        try:
            hashes = store().read()
        except Exception as error:
            log.warning("HTTP metrics unreadable: %s", error)
            return
        for field, count in sorted(hashes[REQUESTS].items()):
            requests.add_metric(field.split(SEP), count)
        per_series: dict[tuple[str, str], list[float]] = {}
        for field, count in hashes[LATENCY].items():
            view, method, bucket = field.split(SEP)
            counts = per_series.setdefault((view, method), [0.0] * (len(BUCKETS) + 1))
            counts[int(bucket)] += count
        for (view, method), counts in sorted(per_series.items()):
            cumulative, buckets = 0.0, []
            for bound, count in zip([*map(str, BUCKETS), "+Inf"], counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric(
                [view, method], buckets, sum_value=hashes[SECONDS].get(SEP.join((view, method)), 0)
            )
        yield requests
        yield latency
