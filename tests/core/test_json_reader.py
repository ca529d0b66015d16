"""One JSON reader (``apps.core.parsers.loads``) for every form and API that takes JSON text
(docs/limits.md, "JSON nesting depth"): deep nesting, out-of-range numbers and unstorable strings
are a form error naming the field, never a 500."""

import pytest
from django import forms
from django.contrib import admin

from apps.core.parsers import JSONFormField
from apps.sessions.models import SessionKind
from tests.admins import ADMIN_IDS, ADMINS, superuser_request
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("model, model_admin", ADMINS, ids=ADMIN_IDS)
def test_every_json_field_of_every_admin_page_reads_with_the_one_json_reader(model, model_admin):
    request = superuser_request()
    form_classes = []
    if model_admin.has_add_permission(request) or model_admin.has_change_permission(request):
        form_classes.append(model_admin.get_form(request))
    for inline in (inline(model, admin.site) for inline in model_admin.inlines):
        if inline.has_add_permission(request, None) or inline.has_change_permission(request):
            form_classes.append(inline.get_formset(request).form)
    for form_class in form_classes:
        for name, field in form_class.base_fields.items():
            if isinstance(field, forms.JSONField):
                assert isinstance(field, JSONFormField), f"{model._meta.label}.{name}"


@pytest.mark.parametrize(
    "text, message",
    [
        ("[" * 100_000, "nested deeper than 64 levels"),
        ('["a", 1e999]', "out of range"),
        ('["a\\u0000"]', "NUL character"),
    ],
)
def test_a_deep_or_unstorable_json_field_in_the_admin_is_a_form_error_naming_the_field(client, text, message):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    response = client.post(
        f"/admin/{SessionKind._meta.app_label}/sessionkind/add/",
        {"name": "code", "type": SessionKind.Type.PORT, "command": text, "ready_path": "/"},
    )
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert "command" in errors and message in str(errors["command"])
    assert not SessionKind.objects.exists()
