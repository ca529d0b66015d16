"""Finance's cloud spend: the section of the finance page, its CSV exports, the cloud line of the
report API, and who sees them. Real rows on the demo estate: the demo cloud pool's nodes, a worker
per node and a task it held, priced at the seeded demo node prices (docs/cloud.md)."""

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from apps.cloud.models import CloudNode, CloudPool
from apps.ledger.models import UsageInterval
from apps.policies.models import ComputeResource
from apps.pools.models import Worker
from apps.tasks.models import Task
from tests.factories import WorkerFactory

pytestmark = pytest.mark.django_db

NOW = datetime(2026, 4, 15, 12, 30, tzinfo=UTC)


def at(hour: int) -> datetime:
    return datetime(2026, 4, 15, hour, tzinfo=UTC)


def node(name: str, market: str, launched, terminated) -> CloudNode:
    cloud_pool = CloudPool.objects.get(pool__name="cloud-h100")
    return CloudNode.objects.create(
        cloud_pool=cloud_pool,
        instance_type=cloud_pool.instance_types.get(name="local.h100x8"),
        market=market,
        name=name,
        state=CloudNode.State.TERMINATED,
        launched_at=launched,
        terminated_at=terminated,
    )


def held(worker: Worker, resource_name: str, gpus: str, start, end) -> UsageInterval:
    resource = ComputeResource.objects.select_related("policy").get(name=resource_name)
    user = resource.policy.group.memberships.first().user
    task = Task.objects.create(
        user=user,
        compute_resource=resource,
        gpus=Decimal(gpus),
        command="train",
        pool=worker.pool,
        worker=worker,
    )
    return UsageInterval.objects.create(
        task=task,
        user=user,
        policy=resource.policy,
        group=resource.policy.group,
        compute_resource=resource,
        pool=worker.pool,
        gpu_type=worker.pool.gpu_type,
        gpus=Decimal(gpus),
        time_weight=Decimal("1"),
        start=start,
        end=end,
        worker=worker,
    )


@pytest.fixture
def cloud_month(estate, time_machine):
    """An on-demand node busy half its life with 4 of its 8 GPUs, and an idle spot node."""
    time_machine.move_to(NOW, tick=False)
    busy = node("cloud-h100-1", CloudNode.Market.ON_DEMAND, at(10), at(12))
    node("cloud-h100-2", CloudNode.Market.SPOT, at(10), at(11))
    worker = WorkerFactory(pool=busy.cloud_pool.pool, hostname=busy.name)
    held(worker, "pretraining/h100-8", "4", at(10), at(11))


def test_finance_sees_cloud_spend_with_its_idle_spare_and_attributed_parts(login, cloud_month):
    page = login("finance").get("/finance/").content.decode()
    # Demo prices: 27.20 on demand, 9.50 spot per node-hour. 2 h + 1 h of nodes.
    assert 'id="cloud-total">€63.90' in page
    assert 'id="cloud-idle">€36.70 (57.4 %)' in page  # 11-12 on demand and the whole spot node
    assert 'id="cloud-attributed">€13.60' in page  # 4 of 8 GPUs for 1 h at 27.20
    assert 'id="cloud-spare">€13.60' in page  # the other 4 GPUs in that hour


def test_the_cloud_tables_export_as_csv(login, cloud_month):
    client = login("finance")
    lines = client.get("/finance/?export=csv&table=cloud").content.decode().splitlines()
    assert lines[0] == (
        "Pool,Instance type,Market,Nodes,Node-hours,Idle node-hours,Cost (EUR),Idle cost (EUR),"
        "Unpriced node-hours"
    )
    assert lines[1:] == [
        "cloud-h100,local.h100x8,on-demand,1,2.000,1.000,54.40,27.20,0.000",
        "cloud-h100,local.h100x8,spot,1,1.000,1.000,9.50,9.50,0.000",
        "Total,,,2,3.000,2.000,63.90,36.70,0.000",
    ]
    groups = client.get("/finance/?export=csv&table=cloudgroups").content.decode().splitlines()
    assert groups[0] == "Part,Group,Path,Cost (EUR),Share of cloud spend (%)"
    assert groups[1] == "Attributed,Pretraining,Acme Labs / Research / Language / Pretraining,13.60,21.3"
    assert groups[2:] == [
        "Attributed to groups,,,13.60,21.3",
        "Idle (nodes holding no task),,,36.70,57.4",
        "Spare (GPUs of busy nodes no task held),,,13.60,21.3",
        "Total,,,63.90,100.0",
    ]


@pytest.mark.parametrize(
    ("role", "status"),
    [("finance", 200), ("cio", 200), ("it", 200), ("head-language", 403), ("dev-pretraining", 403)],
)
def test_only_the_roles_that_see_finance_see_cloud_spend(login, cloud_month, role, status):
    client = login(role)
    page = client.get("/finance/")
    export = client.get("/finance/?export=csv&table=cloudgroups")
    assert (page.status_code, export.status_code) == (status, status)
    assert ("63.90" in page.content.decode()) == (status == 200)


def test_the_report_api_carries_the_cloud_line_for_the_estate_roles_only(login, cloud_month):
    query = "period=month&date=2026-04-01&by=group"
    data = login("finance").get(f"/api/v1/usage/report/?{query}").json()
    cloud = data["cloud_spend"]
    assert (cloud["total"], cloud["idle"], cloud["spare"], cloud["attributed"]) == (
        "63.90",
        "36.70",
        "13.60",
        "13.60",
    )
    assert [(line["market"], line["node_hours"], line["cost"]) for line in cloud["lines"]] == [
        ("on-demand", "2.000", "54.40"),
        ("spot", "1.000", "9.50"),
    ]
    head = login("head-language").get(f"/api/v1/usage/report/?{query}").json()
    assert "cloud_spend" not in head


def test_the_report_api_gives_cloud_spend_in_a_currency_only_node_prices_use(login, cloud_month):
    """Node prices in USD only, GPU prices in EUR: finance asks for the cloud spend in USD."""
    from apps.pricing.models import NodePrice

    NodePrice.objects.filter(currency="EUR").update(currency="USD")
    response = login("finance").get(
        "/api/v1/usage/report/?period=month&date=2026-04-01&by=group&currency=USD"
    )
    assert response.status_code == 200, response.content.decode()[:300]
    cloud = response.json()["cloud_spend"]
    assert (cloud["currency"], cloud["total"]) == ("USD", "63.90")
