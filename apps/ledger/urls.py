from django.urls import path

from apps.ledger import views, views_statements

app_name = "ledger"

urlpatterns = [
    path("", views.report, name="report"),
    path("statements/", views_statements.statement, name="statement"),
    path("cost-centres/", views_statements.cost_centre_cut, name="cost-centres"),
]
