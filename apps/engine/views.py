"""The Prometheus endpoint. Scrapers send ``METRICS_TOKEN`` as a bearer token; without one set,
metrics are served in development (DEBUG) only."""

import hmac

from django.conf import settings
from django.http import HttpResponse, HttpResponseForbidden
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from apps.core.http_metrics import HttpCollector
from apps.engine.metrics import KliqueCollector


def metrics(request):
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(sent.encode(), token.encode()):
            return HttpResponseForbidden("metrics need the scrape token")
    elif not settings.DEBUG:
        return HttpResponseForbidden("set METRICS_TOKEN to serve metrics outside development")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KliqueCollector())
    registry.register(HttpCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
