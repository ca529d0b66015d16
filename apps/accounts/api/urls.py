from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.accounts.api import views
from apps.accounts.api.agents import AgentViewSet

router = SimpleRouter()
router.register("agents", AgentViewSet, basename="api-agent")

urlpatterns = [
    path("me/", views.MeView.as_view(), name="api-me"),
    *router.urls,
]
