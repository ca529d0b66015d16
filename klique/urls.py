"""Top-level URL map: IT's admin, the portal and the versioned API."""

from django.contrib import admin
from django.urls import include, path

admin.site.site_header = "Klique control plane"
admin.site.site_title = "Klique admin"
admin.site.index_title = "IT console"

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("klique.api_urls")),
    path("", include("apps.portal.urls")),
]
