from django.urls import path
from rest_framework.routers import SimpleRouter

from apps.sessions.api import views

router = SimpleRouter()
router.register("session-kinds", views.SessionKindViewSet, basename="api-session-kind")

urlpatterns = [
    *router.urls,
    path("sessions/<int:pk>/access/", views.SessionAccessView.as_view(), name="api-session-access"),
    path("sessions/<int:pk>/sharing/", views.SharingView.as_view(), name="api-session-sharing"),
]
