"""The one audited-change pattern (``apps.core.audit``): every change trail has who, when and
through which channel, newest first, is written through ``record_change`` and is read-only in the
admin."""

from datetime import UTC, datetime

import pytest
from django.apps import apps as registry
from django.contrib import admin
from django.db import models
from django.utils import timezone

from apps.cloud.models import CloudBillBooking, CloudSpendCapChange
from apps.core.audit import AuditedChange, record_change
from apps.core.audit_admin import AuditTrailAdmin
from apps.policies.models import PolicyChange
from apps.pools.models import MaintenanceChange
from apps.pricing.models import PriceChange
from tests.admins import superuser_request
from tests.factories import PolicyFactory, UserFactory

TRAILS = [PriceChange, CloudSpendCapChange, PolicyChange, MaintenanceChange, CloudBillBooking]
TRAIL_IDS = [trail.__name__ for trail in TRAILS]


def test_the_trails_are_every_model_with_an_actor_a_channel_and_a_time():
    recorded = [
        m for m in registry.get_models() if {"actor", "via", "at"} <= {f.name for f in m._meta.fields}
    ]
    assert sorted(recorded, key=str) == sorted(TRAILS, key=str)
    assert all(issubclass(trail, AuditedChange) for trail in TRAILS)


@pytest.mark.parametrize("trail", TRAILS, ids=TRAIL_IDS)
def test_a_trail_keeps_who_newest_first_and_its_own_channels(trail):
    actor = trail._meta.get_field("actor")
    assert actor.null and actor.remote_field.on_delete is models.SET_NULL
    assert trail._meta.get_field("at").db_index
    assert trail._meta.ordering == ["-at", "-pk"]
    assert trail._meta.get_field("via").choices == trail.Via.choices


@pytest.mark.django_db
def test_record_change_stamps_now_unless_given_a_time_and_takes_keywords_only():
    policy, user = PolicyFactory(), UserFactory()
    started = timezone.now()
    change = record_change(
        PolicyChange,
        actor=user,
        via=PolicyChange.Via.ADMIN,
        policy=policy,
        changes={"limit": ["8.000", "9.000"]},
    )
    change.refresh_from_db()
    assert started <= change.at <= timezone.now()
    assert (change.actor, change.via, change.policy) == (user, "admin", policy)
    assert change.changes == {"limit": ["8.000", "9.000"]}

    at = datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
    change = record_change(
        PolicyChange, actor=None, via="portal", at=at, policy=policy, changes={"limit": [1, 2]}
    )
    assert PolicyChange.objects.get(pk=change.pk).at == at
    with pytest.raises(TypeError):
        record_change(PolicyChange, user, "admin")


@pytest.mark.django_db
@pytest.mark.parametrize("trail", TRAILS, ids=TRAIL_IDS)
def test_a_trail_is_read_only_in_the_admin_and_shows_every_field(trail):
    model_admin, request = admin.site._registry[trail], superuser_request()
    assert isinstance(model_admin, AuditTrailAdmin)
    assert model_admin.has_view_permission(request)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request) and not model_admin.has_delete_permission(request)
    shown = model_admin.get_fields(request)
    assert sorted(shown) == sorted(f.name for f in trail._meta.fields if f.name != "id")
