"""The SDK's public entry point: one typed method per endpoint of the user API (``/api/v1/``) on
``Client``, the records it returns and the exceptions it raises. ``from klique.client.sdk import
Client`` keeps working; each resource's records and methods live in the modules of this package.

Every call acts as the token's user and tells the server its channel (``sdk`` by default; the CLI
says ``cli``, the MCP server ``mcp``). Refusals raise an ``ApiError`` subclass carrying the
server's message and field errors. Retries: ``klique.client.sdk.connection``.
"""

from klique.client.sdk.account import Me
from klique.client.sdk.client import Client
from klique.client.sdk.errors import (
    ApiError,
    AuthenticationFailed,
    BulkUnsupported,
    CertificateNotTrusted,
    ConnectionFailed,
    InvalidRequest,
    KliqueError,
    NotFound,
    NotLoggedIn,
    PermissionDenied,
    ServerError,
    WaitTimeout,
)
from klique.client.sdk.loans import ChangeRequest, Loan
from klique.client.sdk.maintenance import MaintenanceWindow
from klique.client.sdk.pipelines import PipelineError, TaskArray
from klique.client.sdk.records import as_json
from klique.client.sdk.resources import ComputeResource
from klique.client.sdk.schedules import Schedule
from klique.client.sdk.sessions import SessionKind
from klique.client.sdk.tasks import FINAL_STATES, Link, Preemption, Session, Task, Verdict
from klique.client.sdk.usage import BudgetWindow, Usage
from klique.client.sdk.whatif import WHATIF_FINAL_STATES, WhatIfRun

__all__ = [
    "FINAL_STATES",
    "WHATIF_FINAL_STATES",
    "ApiError",
    "AuthenticationFailed",
    "BudgetWindow",
    "BulkUnsupported",
    "CertificateNotTrusted",
    "ChangeRequest",
    "Client",
    "ComputeResource",
    "ConnectionFailed",
    "InvalidRequest",
    "KliqueError",
    "Link",
    "Loan",
    "MaintenanceWindow",
    "Me",
    "NotFound",
    "NotLoggedIn",
    "PermissionDenied",
    "PipelineError",
    "Preemption",
    "Schedule",
    "ServerError",
    "Session",
    "SessionKind",
    "Task",
    "TaskArray",
    "Usage",
    "Verdict",
    "WaitTimeout",
    "WhatIfRun",
    "as_json",
]
