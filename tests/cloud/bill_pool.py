"""The AWS pool of the bill tests on the demo estate: p5.48xlarge nodes priced by Klique at 55.04
USD on demand and 22.00 USD spot per node-hour, and the nodes of ``bill_files.NODES``."""

from datetime import date
from decimal import Decimal

import pytest

from apps.cloud.models import CloudNode, CloudPool, InstanceType
from apps.pools.models import GpuType, Pool
from apps.pricing.models import NodePrice
from tests.cloud.bill_files import NODES


def aws_pool() -> CloudPool:
    pool = Pool.objects.create(
        name="aws-h100", kind=Pool.Kind.CLOUD, gpu_type=GpuType.objects.get(name="H100"), capacity=Decimal(32)
    )
    cloud_pool = CloudPool.objects.create(
        pool=pool, provider="ec2", settings={"region": "eu-west-1", "image_id": "ami-0abc12345def67890"}
    )
    InstanceType.objects.create(cloud_pool=cloud_pool, name="p5.48xlarge", gpus=8, max_count=4)
    for market, price in (("on-demand", "55.04"), ("spot", "22.00")):
        NodePrice.objects.create(
            instance_type="p5.48xlarge",
            market=market,
            currency="USD",
            per_node_hour=Decimal(price),
            effective_from=date(2026, 1, 1),
        )
    return cloud_pool


def add_nodes(cloud_pool: CloudPool, nodes=NODES) -> list[CloudNode]:
    kind = cloud_pool.instance_types.get()
    return [
        CloudNode.objects.create(
            cloud_pool=cloud_pool,
            instance_type=kind,
            market=market,
            name=name,
            instance_id=instance_id,
            state=CloudNode.State.TERMINATED,
            launched_at=launched,
            terminated_at=terminated,
        )
        for name, instance_id, market, launched, terminated in nodes
    ]


@pytest.fixture
def aws_month(estate):
    """The pool and its November 2026 nodes; returns the cloud pool."""
    cloud_pool = aws_pool()
    add_nodes(cloud_pool)
    return cloud_pool
