"""SCIM passes the independent checker: scim2-tester (PyPI, by Yaal Coop, not Klique's code) runs
every check it has (discovery, CRUD, attribute selection, PATCH add/remove/replace on every
attribute) over HTTP against a live server, and none may fail."""

import httpx2
import pytest
from scim2_client.engines.httpx2 import SyncSCIMClient
from scim2_tester import Status, check_server

from apps.scim import services

FAILING = {Status.ERROR, Status.CRITICAL}


@pytest.mark.django_db(transaction=True)
def test_the_scim_endpoint_passes_scim2_tester(live_server):
    _, token = services.create_provider(name="conformance")
    http = httpx2.Client(
        base_url=f"{live_server.url}/scim/v2", headers={"Authorization": f"Bearer {token}"}, timeout=30
    )
    with http:
        results = check_server(SyncSCIMClient(http))
    failed = [f"{r.title} [{r.resource_type}]: {r.reason}" for r in results if r.status in FAILING]
    assert not failed, "\n".join(failed)
    assert sum(r.status == Status.SUCCESS for r in results) > 50
