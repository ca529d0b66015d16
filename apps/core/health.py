"""Probes for load balancers and Kubernetes, answered by the first middleware, before the host
check, the HTTPS redirect, sessions and login: a probe comes over plain HTTP to the pod's address.

``/healthz`` (liveness): the process answers; nothing else is asked.
``/readyz`` (readiness): one ``SELECT 1``; a Redis ``PING`` when ``REDIS_URL`` is set; the age of the
engine's last pass (not skipped) against ``READY_MAX_PASS_AGE_S`` (0: not checked). 200 when all
pass, else 503; the JSON body names each check and what failed.
"""

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse
from django.utils import timezone

PROBE_TIMEOUT_S = 2


def _database() -> dict:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return {}


def _redis() -> dict:
    client = redis.Redis.from_url(
        settings.REDIS_URL, socket_connect_timeout=PROBE_TIMEOUT_S, socket_timeout=PROBE_TIMEOUT_S
    )
    try:
        client.ping()
    finally:
        client.close()
    return {}


class Stale(Exception):
    pass


def _engine() -> dict:
    from apps.engine.models import PassRecord

    limit = settings.READY_MAX_PASS_AGE_S
    last = (
        PassRecord.objects.filter(skipped=False)
        .order_by("-started_at")
        .values_list("started_at", flat=True)
        .first()
    )
    if last is None:
        raise Stale("no engine pass recorded")
    age = (timezone.now() - last).total_seconds()
    if age > limit:
        raise Stale(f"the last engine pass began {age:.0f} s ago (limit {limit:g} s)")
    return {"last_pass_age_s": round(age, 1)}


def readiness() -> tuple[bool, dict]:
    checks = {"database": _database}
    if settings.REDIS_URL:
        checks["redis"] = _redis
    if settings.READY_MAX_PASS_AGE_S > 0:
        checks["engine"] = _engine
    results, failed = {}, []
    for name, check in checks.items():
        try:
            results[name] = {"ok": True, **check()}
        except Exception as error:
            results[name] = {"ok": False, "error": str(error) or type(error).__name__}
            failed.append(name)
    return not failed, {"status": "ready" if not failed else "not ready", "failed": failed, "checks": results}


def _answer(body: dict, status: int) -> JsonResponse:
    response = JsonResponse(body, status=status)
    response["Cache-Control"] = "no-store"
    return response


class HealthMiddleware:
    """Answers ``/healthz`` and ``/readyz`` (GET or HEAD) itself; everything else passes on."""

    PATHS = {"/healthz", "/readyz"}

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        if request.path not in self.PATHS or request.method not in ("GET", "HEAD"):
            return self.get_response(request)
        if request.path == "/healthz":
            return _answer({"status": "alive"}, 200)
        ready, body = readiness()
        return _answer(body, 200 if ready else 503)
