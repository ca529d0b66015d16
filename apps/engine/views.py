"""The Prometheus endpoint. When ``METRICS_TOKEN`` is set, scrapers must send it as a bearer token."""

import hmac

from django.conf import settings
from django.http import HttpResponse, HttpResponseForbidden
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from apps.engine.metrics import KliqueCollector


def metrics(request):
    token = settings.METRICS_TOKEN
    if token:
        sent = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(sent, token):
            return HttpResponseForbidden("metrics need the scrape token")
    registry = CollectorRegistry(auto_describe=False)
    registry.register(KliqueCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
