from rest_framework.routers import SimpleRouter

from apps.governance.api import views

router = SimpleRouter()
router.register("change-requests", views.ChangeRequestViewSet, basename="api-change-request")

urlpatterns = router.urls
