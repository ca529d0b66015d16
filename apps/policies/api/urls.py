from django.urls import path

from apps.policies.api import views

urlpatterns = [
    path("splits/<slug:group_slug>/", views.SplitView.as_view(), name="api-split"),
]
