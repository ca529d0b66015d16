from rest_framework.routers import SimpleRouter

from apps.sessions.api import views

router = SimpleRouter()
router.register("session-kinds", views.SessionKindViewSet, basename="api-session-kind")

urlpatterns = router.urls
