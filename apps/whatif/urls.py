"""The what-if page, mounted by the portal at ``/it/whatif/`` in its namespace (``portal:whatif*``)."""

from django.urls import path

from apps.whatif import views

urlpatterns = [
    path("", views.whatif, name="whatif"),
    path("<int:pk>/", views.run_detail, name="whatif-run"),
    path("<int:pk>/status/", views.run_status, name="whatif-status"),
    path("<int:pk>/csv/", views.run_csv, name="whatif-csv"),
]
