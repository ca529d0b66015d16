"""Top-level URL map: IT's admin, the portal and the versioned API."""

from csp.decorators import csp_update
from django.contrib import admin
from django.http import HttpResponsePermanentRedirect
from django.templatetags.static import static
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerSplitView

from apps.engine.views import metrics
from klique.version import VERSION

# Redoc injects its styles and starts its search worker from a blob at run time: its page alone
# allows both (never an inline script).
redoc = csp_update({"style-src": ["'unsafe-inline'"], "worker-src": ["'self'", "blob:"]})(
    SpectacularRedocView.as_view(url_name="api-schema")
)

admin.site.site_header = "Klique control plane"
admin.site.site_title = "Klique admin"
admin.site.index_title = f"Klique admin, release {VERSION}"  # the index, after login only

handler400 = "apps.core.errors.bad_request"
handler404 = "apps.core.errors.not_found"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("klique.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerSplitView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", redoc, name="api-redoc"),
    path("accounts/", include("allauth.urls")),
    path("account/", include("apps.accounts.urls")),
    path("scim/v2/", include("apps.scim.urls")),
    path("reports/", include("apps.ledger.urls")),
    path("prices/", include("apps.pricing.urls")),
    path("metrics", metrics, name="metrics"),
    # Pages without an icon link (the admin's) make browsers ask for /favicon.ico.
    path("favicon.ico", lambda request: HttpResponsePermanentRedirect(static("klique/favicon.svg"))),
    path("", include("apps.portal.urls")),
]
