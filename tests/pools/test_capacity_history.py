"""The pools' capacity history: written however a pool's declared capacity or ``enabled`` changes
(services, the admin, the cloud autoscaler, any save), complete from migration 0007 on, and read as
segments of the capacity in force (docs/ledger.md, "Capacity history")."""

import importlib
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.apps import apps as global_apps

from apps.cloud import services as cloud
from apps.pools import services as pools
from apps.pools.models import SINCE_EVER, Pool, PoolCapacityChange
from apps.pools.selectors import CapacitySegment, capacity_segments
from tests.factories import GpuTypeFactory, UserFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 4, 1, tzinfo=UTC)
H = timedelta(hours=1)


@pytest.fixture
def pool():
    return pools.create_pool(name="onprem", kind="kubernetes", gpu_type=GpuTypeFactory(), capacity=8, now=T0)


def history(pool) -> list[tuple]:
    return list(
        PoolCapacityChange.objects.filter(pool=pool)
        .order_by("at", "pk")
        .values_list("at", "capacity", "enabled", "reason")
    )


def test_every_change_of_capacity_or_enabled_is_a_row_and_other_saves_are_not(pool):
    it = UserFactory(username="it")
    pools.update_pool(pool, capacity=Decimal("16"), now=T0 + 2 * H, by=it, reason="new rack")
    pools.update_pool(pool, region="eu-west", now=T0 + 3 * H)
    pools.update_pool(pool, enabled=False, now=T0 + 4 * H, reason="maintenance")
    pool.capacity = Decimal("12")
    pool.save()  # any save, even without the services
    rows = history(pool)
    assert rows[:3] == [
        (T0, Decimal("8.000"), True, "created"),
        (T0 + 2 * H, Decimal("16.000"), True, "new rack"),
        (T0 + 4 * H, Decimal("16.000"), False, "maintenance"),
    ]
    assert rows[3][1:3] == (Decimal("12.000"), False) and len(rows) == 4
    assert PoolCapacityChange.objects.get(reason="new rack").by == it


def test_the_selector_gives_the_capacity_in_force_at_each_moment_as_segments(pool):
    pools.update_pool(pool, capacity=Decimal("16"), now=T0 + 2 * H)
    pools.update_pool(pool, region="eu-west", now=T0 + 3 * H)
    pools.update_pool(pool, enabled=False, now=T0 + 4 * H)
    pools.update_pool(pool, enabled=True, capacity=Decimal("4"), now=T0 + 10 * H)
    assert capacity_segments(pool, T0 - H, T0 + 6 * H) == [
        CapacitySegment(T0 - H, T0, Decimal(0), False),  # before it existed
        CapacitySegment(T0, T0 + 2 * H, Decimal("8.000"), True),
        CapacitySegment(T0 + 2 * H, T0 + 4 * H, Decimal("16.000"), True),
        CapacitySegment(T0 + 4 * H, T0 + 6 * H, Decimal("16.000"), False),
    ]
    inside = capacity_segments(pool, T0 + 3 * H, T0 + 3 * H + timedelta(minutes=30))
    assert [(s.capacity, s.in_force) for s in inside] == [(Decimal("16.000"), Decimal("16.000"))]
    assert [s.in_force for s in capacity_segments(pool, T0 + 5 * H, T0 + 11 * H)] == [0, Decimal("4.000")]


def test_the_admin_records_who_changed_it_and_why(client, pool):
    root = UserFactory(username="root", is_staff=True, is_superuser=True)
    client.force_login(root)
    url = f"/admin/pools/pool/{pool.pk}/change/"
    page = client.get(url).content.decode()
    data = {name: "0" for name in re.findall(r'name="([\w-]+-(?:TOTAL|INITIAL)_FORMS)"', page)}
    data.update(
        name=pool.name,
        kind=pool.kind,
        gpu_type=pool.gpu_type_id,
        capacity="24",
        enabled="on",
        multi_node="unknown",
        capacity_reason="second rack delivered",
    )
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    last = PoolCapacityChange.objects.filter(pool=pool).latest("at", "pk")
    assert (last.capacity, last.by, last.reason) == (Decimal("24.000"), root, "second rack delivered (admin)")
    assert "second rack delivered (admin)" in client.get(url).content.decode()


def test_the_cloud_autoscaler_records_its_capacity_changes(tmp_path):
    pool = pools.create_pool(name="cloud", kind="cloud", gpu_type=GpuTypeFactory(), capacity=0, now=T0)
    settings = {"folder": str(tmp_path), "instance_types": {"x8": 8}}
    cloud_pool = cloud.create_cloud_pool(pool=pool, provider="local", settings=settings)
    cloud.add_instance_type(cloud_pool, name="x8", gpus=8, max_count=2)
    assert [row[1] for row in history(pool)] == [Decimal("0.000"), Decimal("16.000")]
    assert history(pool)[-1][3] == "cloud pool's maximum"


def test_the_migration_gives_each_existing_pool_a_first_row_in_force_since_ever(pool):
    other = pools.create_pool(name="hpc", kind="hpc", gpu_type=pool.gpu_type, capacity=4, enabled=False)
    PoolCapacityChange.objects.all().delete()
    migration = importlib.import_module("apps.pools.migrations.0007_pool_capacity_history")
    migration.initial_rows(global_apps, None)
    rows = {r.pool_id: (r.at, r.capacity, r.enabled) for r in PoolCapacityChange.objects.all()}
    assert rows == {
        pool.pk: (SINCE_EVER, Decimal("8.000"), True),
        other.pk: (SINCE_EVER, Decimal("4.000"), False),
    }
    assert Pool.objects.count() == 2
