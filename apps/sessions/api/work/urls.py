from rest_framework.routers import SimpleRouter

from apps.tasks.api import views

router = SimpleRouter()
router.register("tasks", views.TaskViewSet, basename="api-task")
router.register("schedules", views.ScheduleViewSet, basename="api-schedule")

urlpatterns = router.urls
