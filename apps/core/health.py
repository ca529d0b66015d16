"""Probes for load balancers and Kubernetes, answered by the first middleware, before the host
check, the HTTPS redirect, sessions and login: a probe comes over plain HTTP to the pod's address.

``/healthz`` (liveness): the process answers; nothing else is asked.
``/readyz`` (readiness): one ``SELECT 1`` and a Redis ``PING`` when ``REDIS_URL`` is set; 200 when
both pass, else 503; the JSON body names each check and what failed (the exception's kind only:
the details, which name hosts and users, go to the log). The age of the engine's last pass (not
skipped) is reported too, but a web process stays ready when the engine stalls (the portal and the
worker API still serve; the engine is watched by its own alert): only ``/readyz?engine=1``, the probe
for whatever runs the engine, fails past ``READY_MAX_PASS_AGE_S`` (0: never).
"""

import logging

import redis
from django.conf import settings
from django.db import connection
from django.http import JsonResponse

PROBE_TIMEOUT_S = 2
log = logging.getLogger("klique.health")


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


# Checks of apps above the foundation, registered from their AppConfig.ready: name -> check(strict),
# where ``strict`` is whether the probe asked for it (``?engine=1``). The engine registers "engine".
APP_CHECKS: dict = {}


def readiness(*, engine: bool = False) -> tuple[bool, dict]:
    """Whether this web process is ready; with ``engine``, also whether the engine passes on time."""
    checks = {"database": _database}
    if settings.REDIS_URL:
        checks["redis"] = _redis
    for name, check in APP_CHECKS.items():
        checks[name] = lambda check=check: check(strict=engine)
    results, failed = {}, []
    for name, check in checks.items():
        try:
            results[name] = {"ok": True, **check()}
        except Stale as error:
            results[name] = {"ok": False, "error": str(error)}
            failed.append(name)
        except Exception as error:
            log.warning("readiness check %s failed", name, exc_info=True)
            results[name] = {"ok": False, "error": type(error).__name__}
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
        ready, body = readiness(engine=request.GET.get("engine") == "1")
        return _answer(body, 200 if ready else 503)
