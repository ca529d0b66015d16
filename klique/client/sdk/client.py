"""``Client``: the SDK's one class, the connection with every resource's endpoint methods."""

from klique.client.sdk.account import AccountApi
from klique.client.sdk.connection import Connection
from klique.client.sdk.loans import LoansApi
from klique.client.sdk.maintenance import MaintenanceApi
from klique.client.sdk.pipelines import PipelinesApi
from klique.client.sdk.resources import ResourcesApi
from klique.client.sdk.schedules import SchedulesApi
from klique.client.sdk.sessions import SessionsApi
from klique.client.sdk.tasks import TasksApi
from klique.client.sdk.usage import UsageApi
from klique.client.sdk.whatif import WhatIfApi


class Client(
    Connection,
    AccountApi,
    ResourcesApi,
    TasksApi,
    PipelinesApi,
    SessionsApi,
    UsageApi,
    SchedulesApi,
    WhatIfApi,
    MaintenanceApi,
    LoansApi,
):
    """A session with one Klique server as one user.

    ``retries`` is how many times a request is repeated, with a short backoff: an idempotent one
    (GET, PUT, DELETE, cancel) on a connection error or a timeout, any other only when the
    connection was never made. Pass ``transport`` to use another httpx transport (tests, proxies).
    ``ca_bundle`` is a CA file to check the server's certificate with (default: ``SSL_CERT_FILE``,
    else certifi's CAs); a certificate that does not verify is never retried.
    """
