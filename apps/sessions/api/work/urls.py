from rest_framework.routers import SimpleRouter

from apps.sessions.api.work import compute_resources, views

router = SimpleRouter()
router.register(
    "compute-resources", compute_resources.ComputeResourceViewSet, basename="api-compute-resource"
)
router.register("tasks", views.TaskViewSet, basename="api-task")
router.register("schedules", views.ScheduleViewSet, basename="api-schedule")

urlpatterns = router.urls
