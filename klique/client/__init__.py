"""Klique's Python SDK, the ``klique`` CLI and the MCP server. None of it imports Django.

from klique.client import Client

with Client.from_config() as klique:
    task = klique.submit("vision/a100", ["python", "train.py"])
    print(klique.wait(task.id).state)
"""

from klique.client.sdk.account import Me
from klique.client.sdk.client import Client
from klique.client.sdk.errors import (
    ApiError,
    AuthenticationFailed,
    ConnectionFailed,
    InvalidRequest,
    KliqueError,
    NotFound,
    NotLoggedIn,
    PermissionDenied,
    ServerError,
    WaitTimeout,
)
from klique.client.sdk.resources import ComputeResource
from klique.client.sdk.schedules import Schedule
from klique.client.sdk.tasks import Preemption, Task, Verdict
from klique.client.sdk.usage import Usage
from klique.client.sdk.whatif import WhatIfRun

__all__ = [
    "ApiError",
    "AuthenticationFailed",
    "Client",
    "ComputeResource",
    "ConnectionFailed",
    "InvalidRequest",
    "KliqueError",
    "Me",
    "NotFound",
    "NotLoggedIn",
    "PermissionDenied",
    "Preemption",
    "Schedule",
    "ServerError",
    "Task",
    "Usage",
    "Verdict",
    "WaitTimeout",
    "WhatIfRun",
]
