"""IT's admin reads numbers as the API and the portal do: every decimal and whole-number field of
every Klique admin page (inlines included) refuses ``"1_0"`` and full-width digits, which Django's
own fields read as 10 and 1."""

import pytest
from django import forms
from django.contrib import admin

from apps.core.fields import PlainDecimalFormField, PlainIntegerFormField
from apps.pools.models import Pool
from tests.admins import ADMIN_IDS, ADMINS, superuser_request
from tests.factories import PoolFactory, UserFactory

pytestmark = pytest.mark.django_db


def number_fields(form_class):
    return {
        name: field
        for name, field in form_class.base_fields.items()
        if isinstance(field, forms.DecimalField | forms.IntegerField)
        and not isinstance(field, forms.FloatField)
    }


@pytest.mark.parametrize("model, model_admin", ADMINS, ids=ADMIN_IDS)
def test_every_number_field_of_every_admin_page_reads_plain_notation_only(model, model_admin):
    request = superuser_request()
    form_classes = [model_admin.get_form(request)]
    form_classes += [inline(model, admin.site).get_formset(request).form for inline in model_admin.inlines]
    for form_class in form_classes:
        for name, field in number_fields(form_class).items():
            assert isinstance(field, PlainDecimalFormField | PlainIntegerFormField), (form_class, name)


@pytest.mark.parametrize("loose", ["1_0", "\uff11\uff10", "1e1"])
def test_a_pool_capacity_in_loose_notation_is_refused_in_the_admin(client, loose):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    pool = PoolFactory(name="onprem", capacity=8)
    data = {"name": pool.name, "kind": pool.kind, "gpu_type": pool.gpu_type_id, "capacity": loose}
    response = client.post(f"/admin/pools/pool/{pool.pk}/change/", data)
    assert response.status_code == 200
    assert "Plain decimal notation only" in response.content.decode()
    assert Pool.objects.get(pk=pool.pk).capacity == 8
