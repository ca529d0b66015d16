from django.urls import path

from apps.workers.api import lean, views, wait

urlpatterns = [
    path("enrol", views.EnrolView.as_view(), name="worker-enrol"),
    path("heartbeat", views.HeartbeatView.as_view(), name="worker-heartbeat"),
    path("claim", views.ClaimView.as_view(), name="worker-claim"),
    path("tunnel", views.TunnelView.as_view(), name="worker-tunnel"),
    path("wait", wait.WaitView.as_view(), name="worker-wait"),
    path("sync", lean.sync, name="worker-sync"),
    path("tasks/<int:task_id>/started", views.started, name="worker-started"),
    path("tasks/<int:task_id>/exited", views.exited, name="worker-exited"),
    path("tasks/<int:task_id>/stopped", views.stopped, name="worker-stopped"),
    path("tasks/<int:task_id>/start_failed", views.start_failed, name="worker-start-failed"),
    path("tasks/<int:task_id>/log", views.log, name="worker-log"),
    path("tasks/<int:task_id>/checkpoint", views.checkpoint, name="worker-checkpoint"),
]
