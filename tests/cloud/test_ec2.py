"""The EC2 provider against moto's EC2-compatible server over HTTP (real boto3 calls). moto grants
every launch, so refusals are injected at the boundary: a ``before-call`` handler on the provider's
real client raises the ClientError EC2 answers, before the request is sent."""

import base64
import uuid

import pytest

from klique.cloud.providers import CapacityUnavailable, ProviderError, SpotRefused, open_provider

pytest.importorskip("boto3", reason="needs boto3: pip install 'boto3>=1.34'")
from botocore.exceptions import ClientError  # noqa: E402

AMI = "ami-03cf127a"  # one of moto's stock images
CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing"}
USER_DATA = (
    "#!/bin/sh\nexport KLIQUE_SERVER=https://klique.example.org\nexport KLIQUE_ENROLMENT_TOKEN=kqe_x\n"
)


@pytest.fixture
def settings(moto_endpoint):
    return {"region": "eu-west-1", "image_id": AMI, "endpoint_url": moto_endpoint}


@pytest.fixture
def provider(settings):
    return open_provider("ec2", settings, CREDENTIALS)


@pytest.fixture
def pool():
    return f"pool-{uuid.uuid4().hex[:8]}"


def refuse(provider, code: str, market: str) -> list[str]:
    """Make RunInstances answer ``code`` for ``market`` launches, as EC2 would; the others go through."""
    refused = []

    def handler(params, **kwargs):
        spot = params["body"].get("InstanceMarketOptions.MarketType") == "spot"
        if ("spot" if spot else "on-demand") == market:
            refused.append(market)
            error = {"Code": code, "Message": f"We currently do not have sufficient {market} capacity."}
            raise ClientError({"Error": error, "ResponseMetadata": {"HTTPStatusCode": 500}}, "RunInstances")

    provider.client.meta.events.register("before-call.ec2.RunInstances", handler)
    return refused


def raw(provider, instance_id: str) -> dict:
    answer = provider.client.describe_instances(InstanceIds=[instance_id])
    return answer["Reservations"][0]["Instances"][0]


def test_spot_launch_is_a_one_time_spot_instance_tagged_with_pool_and_node(provider, pool):
    node = provider.launch(pool, f"{pool}-1", "p4d.24xlarge", "spot", USER_DATA)

    assert (node.pool, node.node, node.instance_type, node.market, node.state) == (
        pool,
        f"{pool}-1",
        "p4d.24xlarge",
        "spot",
        "pending",
    )
    assert node.instance_id.startswith("i-") and node.address and node.launched_at.tzinfo
    seen = raw(provider, node.instance_id)
    assert seen["InstanceLifecycle"] == "spot"
    assert seen["ImageId"] == AMI and seen["InstanceType"] == "p4d.24xlarge"
    tags = {tag["Key"]: tag["Value"] for tag in seen["Tags"]}
    assert tags["klique:pool"] == pool and tags["klique:node"] == f"{pool}-1"
    assert tags["klique:managed-by"] == "klique"
    data = provider.client.describe_instance_attribute(InstanceId=node.instance_id, Attribute="userData")
    assert base64.b64decode(data["UserData"]["Value"]).decode() == USER_DATA


def test_on_demand_launch_is_not_spot(provider, pool):
    node = provider.launch(pool, f"{pool}-1", "g5.xlarge", "on-demand", USER_DATA)

    assert node.market == "on-demand"
    assert "InstanceLifecycle" not in raw(provider, node.instance_id)
    assert [(n.instance_id, n.market) for n in provider.describe(pool)] == [(node.instance_id, "on-demand")]


def test_describe_lists_only_the_pools_own_nodes(provider, settings, pool):
    mine = [provider.launch(pool, f"{pool}-{i}", "g5.xlarge", "on-demand", USER_DATA) for i in range(2)]
    provider.launch(f"{pool}-other", f"{pool}-other-1", "g5.xlarge", "spot", USER_DATA)
    another_plane = open_provider("ec2", {**settings, "managed_by": "klique-staging"}, CREDENTIALS)
    another_plane.launch(pool, f"{pool}-staging-1", "g5.xlarge", "on-demand", USER_DATA)

    found = provider.describe(pool)

    assert sorted(n.instance_id for n in found) == sorted(n.instance_id for n in mine)
    assert {n.node for n in found} == {f"{pool}-0", f"{pool}-1"}
    assert all(n.pool == pool and n.state == "running" and n.live for n in found)
    assert [n.node for n in another_plane.describe(pool)] == [f"{pool}-staging-1"]


def test_describe_pages_through_every_node(provider, pool):
    pages = []
    provider.client.meta.events.register("after-call.ec2.DescribeInstances", lambda **kw: pages.append(1))
    provider.page_size = 5
    launched = {
        provider.launch(pool, f"{pool}-{i}", "g5.xlarge", "spot", USER_DATA).instance_id for i in range(12)
    }

    assert {n.instance_id for n in provider.describe(pool)} == launched
    assert len(pages) == 3


def test_terminate_ends_the_nodes_and_describe_says_why(provider, pool):
    nodes = [provider.launch(pool, f"{pool}-{i}", "g5.xlarge", "spot", USER_DATA) for i in range(3)]

    provider.terminate([nodes[0].instance_id, nodes[1].instance_id])

    states = {n.instance_id: (n.state, n.live, n.reason) for n in provider.describe(pool)}
    assert states[nodes[0].instance_id] == ("terminated", False, "Client.UserInitiatedShutdown")
    assert states[nodes[1].instance_id][0] == "terminated"
    assert states[nodes[2].instance_id] == ("running", True, "")
    provider.terminate([])


@pytest.mark.parametrize(
    "code", ["InsufficientInstanceCapacity", "SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded"]
)
def test_refused_spot_raises_spot_refused_and_on_demand_then_launches(provider, pool, code):
    refused = refuse(provider, code, "spot")

    with pytest.raises(SpotRefused) as caught:
        provider.launch(pool, f"{pool}-1", "p5.48xlarge", "spot", USER_DATA)
    assert caught.value.code == code and "capacity" in caught.value.message
    assert provider.describe(pool) == []

    node = provider.launch(pool, f"{pool}-1", "p5.48xlarge", "on-demand", USER_DATA)
    assert refused == ["spot"]
    assert [(n.instance_id, n.market) for n in provider.describe(pool)] == [(node.instance_id, "on-demand")]


def test_on_demand_capacity_refusal_raises_capacity_unavailable(provider, pool):
    refuse(provider, "InsufficientInstanceCapacity", "spot")
    refuse(provider, "InsufficientInstanceCapacity", "on-demand")

    with pytest.raises(SpotRefused):
        provider.launch(pool, f"{pool}-1", "p5.48xlarge", "spot", USER_DATA)
    with pytest.raises(CapacityUnavailable) as caught:
        provider.launch(pool, f"{pool}-1", "p5.48xlarge", "on-demand", USER_DATA)
    assert caught.value.code == "InsufficientInstanceCapacity"
    assert provider.describe(pool) == []


def test_other_refusals_are_provider_errors_with_the_services_code(provider, pool):
    refuse(provider, "InvalidParameterValue", "spot")
    with pytest.raises(ProviderError) as caught:
        provider.launch(pool, f"{pool}-1", "p5.48xlarge", "spot", USER_DATA)
    assert type(caught.value) is ProviderError and caught.value.code == "InvalidParameterValue"

    with pytest.raises(ProviderError) as caught:
        provider.terminate(["i-0123456789abcdef0"])
    assert caught.value.code == "InvalidInstanceID.NotFound"
    assert "i-0123456789abcdef0" in caught.value.message


def test_credentials_come_from_boto3s_chain_when_none_are_passed(settings, pool, monkeypatch, tmp_path):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")

    with pytest.raises(ProviderError) as caught:
        open_provider("ec2", settings).launch(pool, f"{pool}-1", "g5.xlarge", "spot", USER_DATA)
    assert caught.value.code == "NoCredentialsError"

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "from-the-environment")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "from-the-environment")
    provider = open_provider("ec2", settings)
    assert provider.launch(pool, f"{pool}-1", "g5.xlarge", "spot", USER_DATA).market == "spot"
    assert not any("from-the-environment" in repr(value) for value in vars(provider).values())


def test_an_unreachable_endpoint_is_a_provider_error_after_standard_mode_retries(pool):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    settings = {
        "region": "eu-west-1",
        "image_id": AMI,
        "endpoint_url": f"http://127.0.0.1:{closed}",
        "max_attempts": 3,
    }
    provider = open_provider("ec2", settings, CREDENTIALS)
    sent = []
    provider.client.meta.events.register("before-send.ec2.DescribeInstances", lambda **kw: sent.append(1))

    with pytest.raises(ProviderError) as caught:
        provider.describe(pool)
    assert caught.value.code == "EndpointConnectionError"
    assert len(sent) == 3


def test_bad_settings_name_the_field_and_the_reason():
    from klique.cloud.ec2 import EC2Provider

    errors = EC2Provider.settings_errors(
        {"image_id": "ubuntu", "subnet_id": "net-1", "max_attempts": 50, "secret_access_key": "x"}
    )
    assert errors == {
        "region": "required",
        "image_id": "not an AMI id such as ami-0abc12345def67890",
        "subnet_id": "not a subnet id such as subnet-0abc1234",
        "max_attempts": "a whole number from 1 to 10",
        "secret_access_key": "not a setting of the ec2 provider",
    }
    with pytest.raises(ValueError, match="region: required"):
        open_provider("ec2", {"image_id": AMI})
    with pytest.raises(ValueError, match="market"):
        open_provider("ec2", {"region": "eu-west-1", "image_id": AMI}, CREDENTIALS).launch(
            "p", "p-1", "g5.xlarge", "reserved", USER_DATA
        )
