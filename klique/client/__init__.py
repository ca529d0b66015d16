"""Klique's Python SDK, the ``klique`` CLI and the MCP server. None of it imports Django.

from klique.client import Client

with Client.from_config() as klique:
    task = klique.submit("vision/a100", ["python", "train.py"])
    print(klique.wait(task.id).state)
"""

from klique.client.sdk import (
    ApiError,
    AuthenticationFailed,
    Client,
    ComputeResource,
    ConnectionFailed,
    InvalidRequest,
    KliqueError,
    Me,
    NotFound,
    NotLoggedIn,
    PermissionDenied,
    PipelineError,
    Preemption,
    Schedule,
    ServerError,
    Task,
    TaskArray,
    Usage,
    Verdict,
    WaitTimeout,
    WhatIfRun,
)

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
    "PipelineError",
    "Preemption",
    "Schedule",
    "ServerError",
    "Task",
    "TaskArray",
    "Usage",
    "Verdict",
    "WaitTimeout",
    "WhatIfRun",
]
