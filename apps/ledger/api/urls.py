from django.urls import include, path

from apps.ledger.api import budgets, views

urlpatterns = [
    path("", budgets.UsageView.as_view(), name="api-usage"),
    path("report/", views.UsageReportView.as_view(), name="api-usage-report"),
    path("prices/", include("apps.pricing.api.urls")),
]
