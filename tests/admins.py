"""Every Klique admin page, for tests that check a rule across all of them, and a superuser's request."""

from django.contrib import admin
from django.test import RequestFactory

from apps.accounts import services as accounts
from tests.factories import UserFactory

ADMINS = [
    (model, model_admin)
    for model, model_admin in admin.site._registry.items()
    if model._meta.app_label in accounts.KLIQUE_APP_LABELS
]
ADMIN_IDS = [model._meta.label for model, _ in ADMINS]


def superuser_request():
    request = RequestFactory().get("/admin/")
    request.user = UserFactory(username="root", is_staff=True, is_superuser=True)
    return request
