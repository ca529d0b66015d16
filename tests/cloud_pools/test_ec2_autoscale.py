"""The autoscaler with the EC2 provider against moto's server over HTTP (real boto3 calls). No
worker boots there, so the boot timeout is large and enrolment is done as the enrol service does it
for a daemon. moto grants every launch: a spot refusal is injected at the client's event boundary,
as in ``tests/cloud/test_ec2.py``."""

import base64
import uuid
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from apps.cloud import services as cloud
from apps.cloud.models import CloudNode
from apps.pools.models import Pool
from apps.workers import services as protocol
from klique.cloud.local import read_user_data
from tests.factories import GpuTypeFactory

pytest.importorskip("boto3", reason="needs boto3: pip install 'boto3>=1.34'")
from botocore.exceptions import ClientError  # noqa: E402

pytestmark = pytest.mark.django_db
AMI = "ami-03cf127a"  # one of moto's stock images


@pytest.fixture
def ec2_pool(moto_endpoint, monkeypatch, settings):
    """A cloud pool on moto's EC2; credentials come from the environment, as boto3's chain reads them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    settings.KLIQUE_PUBLIC_URL = "https://klique.example.org"
    settings.CLOUD_NODE_ENVIRONMENT = {}
    name = f"gpu-{uuid.uuid4().hex[:8]}"
    pool = Pool.objects.create(name=name, kind=Pool.Kind.CLOUD, gpu_type=GpuTypeFactory(), capacity=0)
    cloud_pool = cloud.create_cloud_pool(
        pool=pool,
        provider="ec2",
        settings={"region": "eu-west-1", "image_id": AMI, "endpoint_url": moto_endpoint},
        boot_timeout_s=3600,
        idle_timeout_s=1,
    )
    cloud.add_instance_type(cloud_pool, name="g5.12xlarge", gpus=4, max_count=2, spot=True)
    return cloud_pool


def raw(cloud_pool, instance_id: str) -> dict:
    client = cloud.provider_for(cloud_pool).client
    return client.describe_instances(InstanceIds=[instance_id])["Reservations"][0]["Instances"][0]


def test_ec2_node_launched_spot_with_tags_and_user_data_then_terminated_when_idle(ec2_pool, place):
    [task] = place(ec2_pool.pool, 1, gpus="4")
    assert cloud.autoscale()[ec2_pool.pool.name]["launched"] == 1
    node = CloudNode.objects.get()
    instance = raw(ec2_pool, node.instance_id)
    assert instance.get("InstanceLifecycle") == "spot" and node.market == "spot"
    assert instance["InstanceType"] == "g5.12xlarge" and instance["ImageId"] == AMI
    tags = {tag["Key"]: tag["Value"] for tag in instance["Tags"]}
    assert (tags["klique:pool"], tags["klique:node"], tags["klique:managed-by"]) == (
        ec2_pool.pool.name,
        node.name,
        "klique",
    )
    client = cloud.provider_for(ec2_pool).client
    encoded = client.describe_instance_attribute(InstanceId=node.instance_id, Attribute="userData")
    variables = read_user_data(base64.b64decode(encoded["UserData"]["Value"]).decode())
    assert variables["KLIQUE_SERVER"] == "https://klique.example.org"
    assert variables["KLIQUE_WORKER_GPUS"] == "4" and variables["KLIQUE_WORKER_HOSTNAME"] == node.name
    assert variables["KLIQUE_ENROLMENT_TOKEN"].startswith(node.enrolment_token.prefix)

    now = timezone.now()
    worker, _ = protocol.enrol(
        node.enrolment_token, hostname=node.name, gpus=Decimal(4), mode="process", now=now
    )
    cloud.autoscale(now)
    node.refresh_from_db()
    assert node.state == "ready" and node.worker_id == worker.pk
    protocol.claim(worker, free=None, free_gpus=Decimal(4), max_tasks=1, now=now)
    protocol.report_started(worker, task.pk, now=now)
    protocol.report_exited(worker, task.pk, exit_code=0, now=now)

    cloud.autoscale(now)
    summary = cloud.autoscale(now + timedelta(seconds=2))[ec2_pool.pool.name]
    assert summary["released"] == 1 and not summary.get("launched")
    assert raw(ec2_pool, node.instance_id)["State"]["Name"] in ("shutting-down", "terminated")
    cloud.autoscale(now + timedelta(seconds=3))
    node.refresh_from_db()
    assert (node.state, node.reason) == ("terminated", "idle for 1 s")
    assert raw(ec2_pool, node.instance_id)["State"]["Name"] == "terminated"


def test_ec2_spot_refused_launches_on_demand_at_once(ec2_pool, place):
    client = cloud.provider_for(ec2_pool).client
    refused = []

    def no_spot(params, **kwargs):
        if params["body"].get("InstanceMarketOptions.MarketType") == "spot":
            refused.append(True)
            error = {"Code": "InsufficientInstanceCapacity", "Message": "no spot capacity"}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}, "RunInstances")

    client.meta.events.register("before-call.ec2.RunInstances", no_spot)
    try:
        place(ec2_pool.pool, 1, gpus="4")
        cloud.autoscale()
    finally:
        client.meta.events.unregister("before-call.ec2.RunInstances", no_spot)
    node = CloudNode.objects.get()
    assert refused == [True]
    assert (node.state, node.market) == ("booting", "on-demand")
    assert [(a["market"], a.get("code")) for a in node.attempts] == [
        ("spot", "InsufficientInstanceCapacity"),
        ("on-demand", None),
    ]
    assert "InstanceLifecycle" not in raw(ec2_pool, node.instance_id)
    cloud.provider_for(ec2_pool).terminate([node.instance_id])


def test_ec2_on_demand_refused_for_capacity_launches_the_next_type_with_room(ec2_pool, place):
    ec2_pool.instance_types.update(spot=False)
    cloud.add_instance_type(ec2_pool, name="g6.12xlarge", gpus=4, max_count=1, rank=1, spot=False)
    client = cloud.provider_for(ec2_pool).client

    def no_g5(params, **kwargs):
        if params["body"].get("InstanceType") == "g5.12xlarge":
            error = {"Code": "InsufficientInstanceCapacity", "Message": "no g5 capacity"}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}, "RunInstances")

    client.meta.events.register("before-call.ec2.RunInstances", no_g5)
    try:
        place(ec2_pool.pool, 1, gpus="4")
        cloud.autoscale()
    finally:
        client.meta.events.unregister("before-call.ec2.RunInstances", no_g5)
    node = CloudNode.objects.get()
    assert (node.state, node.market, node.instance_type.name) == ("booting", "on-demand", "g6.12xlarge")
    assert [(a["type"], a.get("code")) for a in node.attempts] == [
        ("g5.12xlarge", "InsufficientInstanceCapacity"),
        ("g6.12xlarge", None),
    ]
    assert raw(ec2_pool, node.instance_id)["InstanceType"] == "g6.12xlarge"
    cloud.provider_for(ec2_pool).terminate([node.instance_id])
