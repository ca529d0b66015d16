"""AWS EC2 through boto3: one ``run_instances`` per node, found again by its tags.

Tags on each instance and its volumes: ``klique:pool``, ``klique:node`` and ``klique:managed-by``
(``managed_by`` in the settings, ``klique`` by default, so two control planes can share an account).
Spot nodes are one-time spot requests that terminate on interruption.

Credentials are never kept here: boto3's own chain (environment, shared profile, the instance role
of the control plane's host) or a ``credentials`` dict passed to ``from_settings`` for one client.
Retries are botocore's ``standard`` mode (throttling and transient errors, exponential backoff with
jitter, ``max_attempts`` in all); every ``run_instances`` carries a fresh ``ClientToken`` so a retried
call cannot start a second instance.
"""

import re
import uuid
from datetime import UTC, datetime
from urllib.parse import urlparse

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from klique.cloud.providers import (
    CapacityUnavailable,
    Instance,
    Market,
    ProviderError,
    SpotRefused,
    check_market,
)

# Codes RunInstances answers when it cannot give capacity (or quota) for the request.
CAPACITY_CODES = {
    "InsufficientInstanceCapacity",
    "InsufficientCapacity",
    "InsufficientHostCapacity",
    "InstanceLimitExceeded",
    "VcpuLimitExceeded",
}
SPOT_CODES = CAPACITY_CODES | {"SpotMaxPriceTooLow", "MaxSpotInstanceCountExceeded", "Unsupported"}

STATES = {
    "pending": "pending",
    "running": "running",
    "shutting-down": "stopping",
    "stopping": "stopping",
    "stopped": "stopping",
    "terminated": "terminated",
}

SETTINGS = {
    "region": "the AWS region, e.g. eu-west-1 (required)",
    "image_id": "the AMI the nodes boot (required)",
    "subnet_id": "the subnet the nodes join",
    "security_group_ids": "security groups of the nodes",
    "key_name": "an EC2 key pair for SSH",
    "instance_profile": "the IAM instance profile (name or ARN) the nodes run as",
    "spot_max_price": "the most per hour for a spot node, in USD (default: the on-demand price)",
    "endpoint_url": "another EC2 endpoint (a test server, a VPC endpoint)",
    "managed_by": "the klique:managed-by tag value (default klique)",
    "max_attempts": "botocore standard-mode attempts per call, 1 to 10 (default 5)",
}
CREDENTIALS = ("access_key_id", "secret_access_key", "session_token", "profile")

AMI = re.compile(r"^ami-[0-9a-f]{8,17}$")
REGION = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")


class EC2Provider:
    name = "ec2"
    page_size = 500  # instances per DescribeInstances page (EC2 allows 5 to 1000)

    def __init__(self, client, settings: dict):
        self.client = client
        self.settings = settings
        self.managed_by = settings.get("managed_by") or "klique"

    @classmethod
    def settings_errors(cls, settings: dict) -> dict[str, str]:
        errors = {key: "not a setting of the ec2 provider" for key in settings if key not in SETTINGS}
        for key in ("region", "image_id"):
            if not settings.get(key):
                errors[key] = "required"
        checks = {
            "region": (REGION, "not an AWS region such as eu-west-1"),
            "image_id": (AMI, "not an AMI id such as ami-0abc12345def67890"),
            "subnet_id": (re.compile(r"^subnet-[0-9a-f]{8,17}$"), "not a subnet id such as subnet-0abc1234"),
        }
        for key, (pattern, reason) in checks.items():
            value = settings.get(key)
            if value and (not isinstance(value, str) or not pattern.match(value)):
                errors[key] = reason
        groups = settings.get("security_group_ids")
        if groups is not None and (
            not isinstance(groups, list)
            or not all(isinstance(g, str) and re.match(r"^sg-[0-9a-f]{8,17}$", g) for g in groups)
        ):
            errors["security_group_ids"] = "a list of security group ids such as sg-0abc1234"
        price = settings.get("spot_max_price")
        if price is not None:
            try:
                if float(price) <= 0:
                    raise ValueError
            except (TypeError, ValueError):
                errors["spot_max_price"] = "a positive price per hour in USD"
        url = settings.get("endpoint_url")
        if url is not None and (not isinstance(url, str) or urlparse(url).scheme not in ("http", "https")):
            errors["endpoint_url"] = "an http or https URL"
        attempts = settings.get("max_attempts")
        if attempts is not None and (type(attempts) is not int or not 1 <= attempts <= 10):
            errors["max_attempts"] = "a whole number from 1 to 10"
        for key in ("key_name", "instance_profile", "managed_by"):
            value = settings.get(key)
            if value is not None and (not isinstance(value, str) or not value or len(value) > 255):
                errors[key] = "a text of 1 to 255 characters"
        return errors

    @classmethod
    def from_settings(cls, settings: dict, credentials: dict | None = None) -> "EC2Provider":
        """A client for the pool's region; ``credentials`` (``access_key_id``, ``secret_access_key``,
        ``session_token`` or ``profile``) go to this client only and are not kept."""
        credentials = credentials or {}
        unknown = set(credentials) - set(CREDENTIALS)
        if unknown:
            raise ValueError(f"credentials: unknown keys {', '.join(sorted(unknown))}")
        session = boto3.session.Session(
            aws_access_key_id=credentials.get("access_key_id"),
            aws_secret_access_key=credentials.get("secret_access_key"),
            aws_session_token=credentials.get("session_token"),
            profile_name=credentials.get("profile"),
            region_name=settings["region"],
        )
        config = Config(
            retries={"mode": "standard", "total_max_attempts": settings.get("max_attempts", 5)},
            connect_timeout=10,
            read_timeout=30,
        )
        client = session.client("ec2", endpoint_url=settings.get("endpoint_url"), config=config)
        return cls(client, settings)

    def launch(self, pool: str, node: str, instance_type: str, market: Market, user_data: str) -> Instance:
        check_market(market)
        tags = [
            {"Key": "klique:pool", "Value": pool},
            {"Key": "klique:node", "Value": node},
            {"Key": "klique:managed-by", "Value": self.managed_by},
            {"Key": "Name", "Value": node},
        ]
        request = {
            "ImageId": self.settings["image_id"],
            "InstanceType": instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "UserData": user_data,
            "ClientToken": uuid.uuid4().hex,
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tags},
                {"ResourceType": "volume", "Tags": tags},
            ],
        }
        if self.settings.get("subnet_id"):
            request["SubnetId"] = self.settings["subnet_id"]
        if self.settings.get("security_group_ids"):
            request["SecurityGroupIds"] = self.settings["security_group_ids"]
        if self.settings.get("key_name"):
            request["KeyName"] = self.settings["key_name"]
        profile = self.settings.get("instance_profile")
        if profile:
            request["IamInstanceProfile"] = (
                {"Arn": profile} if profile.startswith("arn:") else {"Name": profile}
            )
        if market == "spot":
            spot = {"SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}
            if self.settings.get("spot_max_price") is not None:
                spot["MaxPrice"] = str(self.settings["spot_max_price"])
            request["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": spot}
        try:
            answer = self.client.run_instances(**request)
        except ClientError as error:
            code, message = _code(error)
            if market == "spot" and code in SPOT_CODES:
                raise SpotRefused(code, message) from error
            if market == "on-demand" and code in CAPACITY_CODES:
                raise CapacityUnavailable(code, message) from error
            raise ProviderError(code, message) from error
        except BotoCoreError as error:
            raise ProviderError(type(error).__name__, str(error)) from error
        return self._instance(answer["Instances"][0], pool=pool, node=node)

    def describe(self, pool: str) -> list[Instance]:
        filters = [
            {"Name": "tag:klique:pool", "Values": [pool]},
            {"Name": "tag:klique:managed-by", "Values": [self.managed_by]},
        ]
        found = []
        try:
            for page in self.client.get_paginator("describe_instances").paginate(
                Filters=filters, PaginationConfig={"PageSize": self.page_size}
            ):
                for reservation in page["Reservations"]:
                    found.extend(self._instance(item) for item in reservation["Instances"])
        except ClientError as error:
            raise ProviderError(*_code(error)) from error
        except BotoCoreError as error:
            raise ProviderError(type(error).__name__, str(error)) from error
        return sorted(found, key=lambda instance: (instance.launched_at, instance.instance_id))

    def terminate(self, instance_ids: list[str]) -> None:
        ids = list(instance_ids)
        try:
            for start in range(0, len(ids), 1000):
                self.client.terminate_instances(InstanceIds=ids[start : start + 1000])
        except ClientError as error:
            raise ProviderError(*_code(error)) from error
        except BotoCoreError as error:
            raise ProviderError(type(error).__name__, str(error)) from error

    def _instance(self, item: dict, pool: str = "", node: str = "") -> Instance:
        tags = {tag["Key"]: tag["Value"] for tag in item.get("Tags") or []}
        state = STATES.get(item["State"]["Name"], "pending")
        reason = ""
        if state in ("stopping", "terminated"):
            reason = (item.get("StateReason") or {}).get("Code") or item.get("StateTransitionReason") or ""
        launched = item.get("LaunchTime") or datetime.now(UTC)
        return Instance(
            instance_id=item["InstanceId"],
            node=tags.get("klique:node", node),
            pool=tags.get("klique:pool", pool),
            instance_type=item["InstanceType"],
            market="spot" if item.get("InstanceLifecycle") == "spot" else "on-demand",
            state=state,
            launched_at=launched if launched.tzinfo else launched.replace(tzinfo=UTC),
            address=item.get("PrivateIpAddress") or item.get("PublicIpAddress"),
            reason=reason,
        )


def _code(error: ClientError) -> tuple[str, str]:
    details = error.response.get("Error") or {}
    return details.get("Code") or "Unknown", details.get("Message") or str(error)
