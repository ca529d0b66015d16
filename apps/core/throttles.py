"""API throttles: a rate per scope (``settings.THROTTLE_RATES``, read on each request), counted per
caller in the cache every web process shares. A refused request is 429 with Retry-After."""

import logging
import math
from types import SimpleNamespace

from django.conf import settings
from django.http import HttpResponse
from rest_framework.throttling import SimpleRateThrottle

log = logging.getLogger("klique.throttles")


class ScopedThrottle(SimpleRateThrottle):
    """DRF's scoped throttle, keyed by who calls (the worker, the enrolment token, the person)
    rather than by address, since many daemons may share one address behind a NAT."""

    def __init__(self):
        pass

    def allow_request(self, request, view) -> bool:
        self.scope = getattr(view, "throttle_scope", None)
        self.rate = settings.THROTTLE_RATES.get(self.scope) if self.scope else None
        if self.rate is None:
            return True
        self.num_requests, self.duration = self.parse_rate(self.rate)
        try:
            return super().allow_request(request, view)
        except Exception:
            # A throttle guards the service; it must not take it down: with the cache (Redis)
            # unreachable, heartbeats and reports go through unthrottled rather than answer 500.
            log.warning("throttle %s not applied: the cache is unreachable", self.scope, exc_info=True)
            return True

    def get_cache_key(self, request, view) -> str:
        auth = getattr(request, "auth", None)
        if getattr(auth, "pk", None) is not None:
            ident = f"{type(auth).__name__.lower()}-{auth.pk}"
        elif request.user.is_authenticated:
            ident = f"user-{request.user.pk}"
        else:
            ident = self.get_ident(request)
        return self.cache_format % {"scope": self.scope, "ident": ident}


def refused(request, scope: str) -> HttpResponse | None:
    """The same throttle for a portal view: a 429 answer when ``scope``'s rate is used up, else None."""
    throttle = ScopedThrottle()
    if throttle.allow_request(request, SimpleNamespace(throttle_scope=scope)):
        return None
    wait = math.ceil(throttle.wait() or 1)
    response = HttpResponse(
        f"Too many requests: try again in {wait} s.", status=429, content_type="text/plain; charset=utf-8"
    )
    response["Retry-After"] = str(wait)
    return response
