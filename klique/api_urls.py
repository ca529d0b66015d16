"""The versioned API under ``/api/v1/``: each app contributes its own ``api/urls.py``,
included here with one line each."""

from django.urls import include, path

urlpatterns = [
    path("", include("apps.accounts.api.urls")),
    path("", include("apps.pools.api.urls")),
    path("", include("apps.policies.api.urls")),
    path("", include("apps.sessions.api.work.urls")),
    path("", include("apps.sessions.api.urls")),
    path("workers/", include("apps.workers.api.urls")),
    path("usage/", include("apps.ledger.api.urls")),
    path("", include("apps.governance.api.urls")),
    path("", include("apps.whatif.api.urls")),
    path("", include("apps.cloud.api_urls")),
    path("", include("apps.portal.api_guarantee")),
    path("", include("apps.portal.api_lost_work")),
]
