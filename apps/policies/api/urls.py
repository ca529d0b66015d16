from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.policies.api import views

router = SimpleRouter()
router.register("compute-resources", views.ComputeResourceViewSet, basename="api-compute-resource")

urlpatterns = [
    *router.urls,
    path("usage/", views.UsageView.as_view(), name="api-usage"),
    path("splits/<slug:group_slug>/", views.SplitView.as_view(), name="api-split"),
]
