from django.urls import include, path

from apps.ledger.api import views

urlpatterns = [
    path("report/", views.UsageReportView.as_view(), name="api-usage-report"),
    path("prices/", include("apps.pricing.api.urls")),
]
