"""The quota advisor's pages, mounted by the portal at ``/advisor/`` (``portal:advisor*``)."""

from django.urls import path

from apps.whatif import advisor_views as views

urlpatterns = [
    path("", views.proposals, name="advisor"),
    path("<int:pk>/", views.proposal_detail, name="advisor-proposal"),
    path("<int:pk>/accept/<slug:slug>/", views.accept, name="advisor-accept"),
]
