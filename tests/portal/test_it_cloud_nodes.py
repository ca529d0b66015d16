"""IT's view of the cloud nodes: every node the autoscaler launched, with its type, market, state,
launch, enrolment, end and why, paginated and exported like IT's other tables."""

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse

from apps.cloud.models import CloudNode, CloudPool

pytestmark = pytest.mark.django_db

LAUNCHED = datetime(2026, 12, 3, 9, 0, 5, tzinfo=UTC)


@pytest.fixture
def nodes(estate):
    """Two nodes of the demo's cloud pool: one ended after its idle timeout, one booting."""
    cloud_pool = CloudPool.objects.get(pool__name="cloud-h100")
    instance_type = cloud_pool.instance_types.get()
    ended = CloudNode.objects.create(
        cloud_pool=cloud_pool,
        instance_type=instance_type,
        market=CloudNode.Market.SPOT,
        name="cloud-h100-0a1b2c3d",
        instance_id="local-0a1b2c3d4e5f",
        state=CloudNode.State.TERMINATED,
        launched_at=LAUNCHED,
        enrolled_at=LAUNCHED + timedelta(seconds=3),
        terminated_at=LAUNCHED + timedelta(minutes=9),
        reason="idle for 120 s",
    )
    booting = CloudNode.objects.create(
        cloud_pool=cloud_pool,
        instance_type=instance_type,
        market=CloudNode.Market.ON_DEMAND,
        name="cloud-h100-9f8e7d6c",
        state=CloudNode.State.BOOTING,
        launched_at=LAUNCHED + timedelta(minutes=10),
    )
    return ended, booting


def test_it_sees_every_cloud_node_with_its_type_market_state_times_and_reason(login, nodes):
    page = login("it").get(reverse("portal:it"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "Cloud nodes" in html
    table = html[html.index('id="nodes"') :]
    table = table[: table.index("</section>")]
    for text in (
        "cloud-h100-0a1b2c3d",
        "cloud-h100-9f8e7d6c",
        "local.h100x8",
        "Spot",
        "On demand",
        "Terminated",
        "Booting",
        "2026-12-03 09:00:05",
        "2026-12-03 09:00:08",
        "2026-12-03 09:09:05",
        "idle for 120 s",
    ):
        assert text in table, text
    assert table.index("cloud-h100-9f8e7d6c") < table.index("cloud-h100-0a1b2c3d"), "newest first"


def test_it_exports_the_cloud_nodes_as_csv(login, nodes):
    answer = login("it").get(reverse("portal:it"), {"export": "csv", "table": "nodes"})
    assert answer.status_code == 200
    rows = list(csv.DictReader(io.StringIO(answer.content.decode())))
    assert [r["Node"] for r in rows] == ["cloud-h100-9f8e7d6c", "cloud-h100-0a1b2c3d"]
    ended = rows[1]
    assert (ended["Pool"], ended["Type"], ended["Market"], ended["State"], ended["Reason"]) == (
        "cloud-h100",
        "local.h100x8",
        "Spot",
        "Terminated",
        "idle for 120 s",
    )


def test_the_cloud_nodes_table_is_paginated(login, nodes):
    ended, _ = nodes
    for n in range(30):
        CloudNode.objects.create(
            cloud_pool=ended.cloud_pool,
            instance_type=ended.instance_type,
            market=CloudNode.Market.SPOT,
            name=f"cloud-h100-{n:08x}",
            state=CloudNode.State.TERMINATED,
            launched_at=LAUNCHED - timedelta(hours=n + 1),
        )
    client = login("it")
    first = client.get(reverse("portal:it")).content.decode()
    second = client.get(reverse("portal:it"), {"nodes-page": 2}).content.decode()
    assert "cloud-h100-9f8e7d6c" in first and "cloud-h100-0000001d" not in first
    assert "cloud-h100-0000001d" in second


def test_a_developer_gets_403_on_the_it_page_and_its_cloud_nodes_export(login, nodes):
    client = login("dev-pretraining")
    assert client.get(reverse("portal:it")).status_code == 403
    answer = client.get(reverse("portal:it"), {"export": "csv", "table": "nodes"})
    assert answer.status_code == 403
    assert b"cloud-h100-0a1b2c3d" not in answer.content
