from rest_framework.routers import SimpleRouter

from apps.pools.api import views

router = SimpleRouter()
router.register("maintenance", views.MaintenanceViewSet, basename="api-maintenance")

urlpatterns = router.urls
