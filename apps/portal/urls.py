from django.urls import include, path

from apps.portal import views
from apps.portal.views import bills, closing, governance, loans, requests, sessions
from apps.portal.views import webhooks as webhook_views

app_name = "portal"

urlpatterns = [
    path("", views.home, name="home"),
    path("leadership/", views.leadership, name="leadership"),
    path("leadership/cloud-caps/", views.set_cloud_cap, name="set-cloud-cap"),
    path("leadership/cloud-caps/<int:pk>/remove/", views.remove_cloud_cap, name="remove-cloud-cap"),
    path("leadership/split/", governance.leadership_split, name="leadership-split"),
    path("tenants/<slug:slug>/", governance.tenant, name="tenant"),
    path("it/", views.it, name="it"),
    path("it/whatif/", include("apps.whatif.urls")),
    path("advisor/", include("apps.whatif.advisor_urls")),
    path("finance/", views.finance, name="finance"),
    path("finance/months/", closing.months, name="months"),
    path("finance/months/close/", closing.close_month, name="close-month"),
    path("finance/months/<int:pk>/reopen/", closing.reopen_month, name="reopen-month"),
    path("finance/months/sweep/", closing.sweep, name="sweep-months"),
    path("finance/bills/", bills.bills_page, name="bills"),
    path("finance/bills/import/", bills.import_bill, name="import-bill"),
    path("finance/bills/book/", bills.book, name="book-bill"),
    path("departments/<slug:slug>/", views.department, name="department"),
    path("departments/<slug:slug>/split/", views.split, name="split"),
    path("departments/<slug:slug>/lend/", loans.lend, name="lend"),
    path("teams/<slug:slug>/", views.team, name="team"),
    path("teams/<slug:slug>/members/", views.add_member, name="add-member"),
    path("teams/<slug:slug>/members/<int:pk>/remove/", views.remove_member, name="remove-member"),
    path("teams/<slug:slug>/projects/<int:pk>/priority/", views.project_priority, name="project-priority"),
    path("work/", views.work, name="work"),
    path("work/tasks/<int:pk>/", views.task_detail, name="task"),
    path("work/tasks/<int:pk>/cancel/", views.cancel, name="cancel"),
    path("work/sessions/<int:pk>/share/", sessions.share, name="share-session"),
    path("sessions/<int:pk>/", sessions.open_session, name="open-session"),
    path("sessions/<int:pk>/<path:rest>", sessions.open_session, name="open-session-page"),
    path("notifications/", views.notifications, name="notifications"),
    path("notifications/<int:pk>/read/", views.notification_read, name="notification-read"),
    path("notifications/read-all/", views.notifications_read_all, name="notifications-read-all"),
    path("groups/<slug:slug>/webhooks/", webhook_views.webhooks, name="webhooks"),
    path("groups/<slug:slug>/webhooks/<int:pk>/test/", webhook_views.webhook_test, name="webhook-test"),
    path("groups/<slug:slug>/webhooks/<int:pk>/remove/", webhook_views.webhook_remove, name="webhook-remove"),
    path("requests/", requests.requests, name="requests"),
    path("requests/new/<slug:slug>/", requests.request_new, name="request-new"),
    path("requests/<int:pk>/", requests.request_detail, name="request"),
    path("requests/<int:pk>/decide/", requests.request_decide, name="request-decide"),
    path("requests/<int:pk>/withdraw/", requests.request_withdraw, name="request-withdraw"),
]
