"""Top-level URL map: IT's admin, the portal and the versioned API."""

from django.contrib import admin
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from apps.engine.views import metrics

admin.site.site_header = "Klique control plane"
admin.site.site_title = "Klique admin"
admin.site.index_title = "IT console"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("klique.api_urls")),
    path("api/schema/", SpectacularAPIView.as_view(), name="api-schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="api-schema"), name="api-docs"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="api-schema"), name="api-redoc"),
    path("accounts/", include("allauth.urls")),
    path("account/", include("apps.accounts.urls")),
    path("reports/", include("apps.ledger.urls")),
    path("prices/", include("apps.pricing.urls")),
    path("metrics", metrics, name="metrics"),
    path("", include("apps.portal.urls")),
]
