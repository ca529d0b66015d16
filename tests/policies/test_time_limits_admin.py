"""Rule 1 (time limits) in IT's admin: a profile and a compute resource carry a default and a
maximum time limit in their forms; a limit of 0 and a default above the maximum that applies (its
own, else the profile's for a compute resource) are refused on the field, in the words of
``apps.policies.rules`` (the model's ``clean``)."""

import pytest
from django.contrib import admin
from django.urls import reverse

from apps.policies.models import ComputeResource, Profile
from tests.admins import superuser_request
from tests.factories import ComputeResourceFactory, PolicyFactory, ProfileFactory

pytestmark = pytest.mark.django_db


def bound(model, instance, **changes):
    """The model's admin form for ``instance`` as its page shows it, with ``changes`` posted."""
    form_class = admin.site._registry[model].get_form(superuser_request(), instance)
    shown = form_class(instance=instance)
    data = {}
    for name in shown.fields:
        value = shown[name].value()
        if isinstance(value, list):
            data[name] = [str(v) for v in value]
        elif isinstance(value, bool):
            if value:
                data[name] = "on"
        else:
            data[name] = "" if value is None else str(value)
    data.update({k: "" if v is None else str(v) for k, v in changes.items()})
    return form_class(data, instance=instance)


@pytest.mark.parametrize(
    ("default", "most", "field", "words"),
    [
        (0, None, "default_time_limit_s", "at least 1 second"),
        (None, 0, "max_time_limit_s", "at least 1 second"),
        (
            7200,
            3600,
            "default_time_limit_s",
            "Default time limit (2 h) cannot exceed the maximum time limit (60 min).",
        ),
    ],
)
def test_time_limits_the_profile_form_refuses_a_zero_or_a_default_above_its_maximum(
    default, most, field, words
):
    profile = ProfileFactory(name="p")
    form = bound(Profile, profile, default_time_limit_s=default, max_time_limit_s=most)
    assert not form.is_valid()
    assert words in " ".join(form.errors[field])


def test_time_limits_the_profile_form_saves_its_limits():
    profile = ProfileFactory(name="p")
    form = bound(Profile, profile, default_time_limit_s=3600, max_time_limit_s=4 * 3600)
    assert form.is_valid(), form.errors
    form.save()
    profile.refresh_from_db()
    assert (profile.default_time_limit_s, profile.max_time_limit_s) == (3600, 4 * 3600)


def test_time_limits_the_compute_resource_form_checks_against_the_profiles_maximum():
    profile = ProfileFactory(name="p", default_time_limit_s=3600, max_time_limit_s=4 * 3600)
    resource = ComputeResourceFactory(name="team/p", profile=profile, policy=PolicyFactory())
    above = bound(ComputeResource, resource, default_time_limit_s=5 * 3600)
    assert not above.is_valid()
    assert above.errors["default_time_limit_s"] == [
        "Default time limit (5 h) cannot exceed the maximum time limit (4 h)."
    ]
    below = bound(ComputeResource, ComputeResource.objects.get(pk=resource.pk), max_time_limit_s=1800)
    assert not below.is_valid()
    assert below.errors.get("max_time_limit_s") == [
        "Default time limit (60 min) cannot exceed the maximum time limit (30 min). "
        "(the default is the profile's)"
    ]
    resource = ComputeResource.objects.get(pk=resource.pk)
    ok = bound(ComputeResource, resource, default_time_limit_s=1800, max_time_limit_s=1800)
    assert ok.is_valid(), ok.errors
    ok.save()
    resource.refresh_from_db()
    assert (resource.default_time_limit_s, resource.max_time_limit_s) == (1800, 1800)


def test_time_limits_the_admin_pages_show_the_fields_and_the_list_columns(admin_client):
    profile = ProfileFactory(name="p", default_time_limit_s=3600, max_time_limit_s=7200)
    resource = ComputeResourceFactory(name="team/p", profile=profile, policy=PolicyFactory())
    page = admin_client.get(reverse("admin:policies_profile_change", args=[profile.pk])).content.decode()
    assert 'name="default_time_limit_s"' in page and 'name="max_time_limit_s"' in page
    page = admin_client.get(reverse("admin:policies_computeresource_change", args=[resource.pk]))
    assert 'name="max_time_limit_s"' in page.content.decode()
    listed = admin_client.get(reverse("admin:policies_computeresource_changelist")).content.decode()
    assert "maximum time limit" in listed.lower()
