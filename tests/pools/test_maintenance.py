"""Maintenance windows (issue 35, rule 3) through the services, the API and the admin: scheduled,
moved and ended early by IT, each audited; overlaps and ends in the past refused by field; read
by everyone signed in."""

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone
from rest_framework.test import APIClient

from apps.accounts.models import Membership
from apps.pools.models import MaintenanceChange, MaintenanceWindow
from apps.pools.services import maintenance
from tests.factories import MembershipFactory, PoolFactory, UserFactory

pytestmark = pytest.mark.django_db

H = timedelta(hours=1)


@pytest.fixture
def pool():
    return PoolFactory(name="onprem-k8s")


def it_client() -> APIClient:
    user = UserFactory(username="it")
    MembershipFactory(user=user, role=Membership.Role.IT_ADMIN)
    client = APIClient()
    client.force_authenticate(user)
    return client


def test_a_window_is_scheduled_and_audited(pool):
    now = timezone.now()
    window = maintenance.schedule(pool, starts_at=now + H, ends_at=now + 3 * H, note="firmware")
    change = MaintenanceChange.objects.get(window=window)
    assert change.changes["note"] == [None, "firmware"] and change.via == "admin"
    assert not window.in_force(now) and window.in_force(now + 2 * H)


def test_overlapping_windows_of_one_pool_are_refused_other_pools_are_not(pool):
    now = timezone.now()
    maintenance.schedule(pool, starts_at=now + H, ends_at=now + 3 * H)
    with pytest.raises(ValidationError) as refused:
        maintenance.schedule(pool, starts_at=now + 2 * H, ends_at=now + 4 * H)
    assert "overlaps" in refused.value.message_dict["starts_at"][0]
    maintenance.schedule(PoolFactory(name="other"), starts_at=now + 2 * H, ends_at=now + 4 * H)


def test_an_end_before_the_start_or_in_the_past_is_refused_by_field(pool):
    now = timezone.now()
    with pytest.raises(ValidationError) as refused:
        maintenance.schedule(pool, starts_at=now + 2 * H, ends_at=now + H)
    assert "ends_at" in refused.value.message_dict
    with pytest.raises(ValidationError) as refused:
        maintenance.schedule(pool, starts_at=now - 3 * H, ends_at=now - H)
    assert "ends_at" in refused.value.message_dict


def test_a_window_ended_early_frees_its_slot_and_is_audited(pool):
    now = timezone.now()
    window = maintenance.schedule(pool, starts_at=now - H, ends_at=now + 3 * H)
    assert window.in_force(now)
    ended = maintenance.end_now(window, now=now)
    assert not ended.in_force(now) and ended.end == now
    assert MaintenanceChange.objects.filter(window=window, changes__has_key="ended_at").exists()
    maintenance.schedule(pool, starts_at=now + H, ends_at=now + 2 * H)  # no overlap with an ended one
    with pytest.raises(ValidationError):
        maintenance.end_now(ended, now=now)


def test_a_window_not_started_and_ended_is_called_off(pool):
    now = timezone.now()
    window = maintenance.end_now(maintenance.schedule(pool, starts_at=now + H, ends_at=now + 2 * H), now=now)
    assert window.called_off and not window.in_force(now + 90 * timedelta(minutes=1))


def test_everyone_reads_the_windows_only_it_writes_them_over_the_api(pool):
    now = timezone.now()
    it = it_client()
    created = it.post(
        "/api/v1/maintenance/",
        {"pool": "onprem-k8s", "starts_at": (now + H).isoformat(), "ends_at": (now + 2 * H).isoformat()},
        format="json",
    )
    assert created.status_code == 201, created.content
    user = APIClient()
    user.force_authenticate(UserFactory(username="someone"))
    listed = user.get("/api/v1/maintenance/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [w["pool"] for w in rows] == ["onprem-k8s"] and rows[0]["in_force"] is False
    refused = user.post(
        "/api/v1/maintenance/",
        {"pool": "onprem-k8s", "starts_at": (now + 5 * H).isoformat(), "ends_at": (now + 6 * H).isoformat()},
        format="json",
    )
    assert refused.status_code == 403
    bad = it.post(
        "/api/v1/maintenance/",
        {"pool": "onprem-k8s", "starts_at": (now + 3 * H).isoformat(), "ends_at": (now + 2 * H).isoformat()},
        format="json",
    )
    assert bad.status_code == 400 and "ends_at" in bad.json()
    ended = it.post(f"/api/v1/maintenance/{created.json()['id']}/end/")
    assert ended.status_code == 200 and ended.json()["ended_at"]
    assert MaintenanceChange.objects.filter(via="api").count() == 2


def test_the_admin_schedules_through_the_services(admin_client, pool):
    now = timezone.now()
    response = admin_client.post(
        "/admin/pools/maintenancewindow/add/",
        {
            "pool": pool.pk,
            "starts_at_0": (now + H).strftime("%Y-%m-%d"),
            "starts_at_1": (now + H).strftime("%H:%M:%S"),
            "ends_at_0": (now + 5 * H).strftime("%Y-%m-%d"),
            "ends_at_1": (now + 5 * H).strftime("%H:%M:%S"),
            "note": "rack swap",
            "changes-TOTAL_FORMS": "0",
            "changes-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302, response.content[:2000]
    window = MaintenanceWindow.objects.get()
    assert window.created_by.is_superuser and MaintenanceChange.objects.filter(window=window).count() == 1
