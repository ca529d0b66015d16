from django.urls import path

from apps.portal import views

app_name = "portal"

urlpatterns = [
    path("", views.home, name="home"),
    path("leadership/", views.leadership, name="leadership"),
    path("leadership/cloud-caps/", views.set_cloud_cap, name="set-cloud-cap"),
    path("leadership/cloud-caps/<int:pk>/remove/", views.remove_cloud_cap, name="remove-cloud-cap"),
    path("it/", views.it, name="it"),
    path("finance/", views.finance, name="finance"),
    path("departments/<slug:slug>/", views.department, name="department"),
    path("departments/<slug:slug>/split/", views.split, name="split"),
    path("teams/<slug:slug>/", views.team, name="team"),
    path("teams/<slug:slug>/members/", views.add_member, name="add-member"),
    path("teams/<slug:slug>/members/<int:pk>/remove/", views.remove_member, name="remove-member"),
    path("teams/<slug:slug>/projects/<int:pk>/priority/", views.project_priority, name="project-priority"),
    path("work/", views.work, name="work"),
    path("work/tasks/<int:pk>/", views.task_detail, name="task"),
    path("work/tasks/<int:pk>/cancel/", views.cancel, name="cancel"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/<int:pk>/read/", views.notification_read, name="notification-read"),
    path("notifications/read-all/", views.notifications_read_all, name="notifications-read-all"),
]
