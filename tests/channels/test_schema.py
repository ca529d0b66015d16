"""schemathesis against ``/api/schema/``: generated requests to every operation, as a member with
a token, never get a 5xx. Bounded by ``max_examples`` so that it finishes in a few minutes."""

import re

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error

from apps.tasks import services
from klique.wsgi import application
from tests.channels.conftest import token_for

pytestmark = pytest.mark.django_db
# A src= or href= whose value is an absolute (http://, https://) or protocol-relative (//host)
# address: a file the page would load from another site.
OFF_SITE = re.compile(r"""\b(src|href)\s*=\s*(["']?)((?:https?:)?//[^"'\s>]+)""", re.IGNORECASE)


@pytest.fixture
def in_process_requests():
    """Keep the test's database connection across requests made straight to the WSGI app, as
    Django's test client does: otherwise each request's end closes it."""
    for signal in (request_started, request_finished):
        signal.disconnect(close_old_connections)
    yield
    for signal in (request_started, request_finished):
        signal.connect(close_old_connections)


@pytest.fixture
def member_headers(estate, in_process_requests):
    services.submit(user=estate.member, compute_resource=estate.vision_a100, command="train")
    services.create_schedule(
        owner=estate.member,
        name="nightly",
        cron="0 2 * * *",
        compute_resource=estate.vision_a100,
        command="x",
    )
    return {"Authorization": f"Bearer {token_for(estate.member)}"}


schema = schemathesis.openapi.from_wsgi("/api/schema/", application)


@schema.parametrize()
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
def test_no_generated_request_gets_a_server_error(case, member_headers):
    case.call_and_validate(headers=member_headers, checks=[not_a_server_error])


def test_the_schema_and_its_docs_page_are_served_from_local_files(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    assert schema["openapi"].startswith("3.") and "/api/v1/tasks/" in schema["paths"]
    assert schema["components"]["securitySchemes"]["personalToken"]["scheme"] == "bearer"
    page = client.get("/api/docs/").content.decode()
    assert "swagger-ui" in page and "/static/drf_spectacular_sidecar/" in page
    assert OFF_SITE.findall(page) == []
    redoc = client.get("/api/redoc/").content.decode()
    assert "/static/drf_spectacular_sidecar/" in redoc
    assert OFF_SITE.findall(redoc) == [], "the Redoc page loads nothing off-site (no web fonts either)"


def test_the_off_site_check_finds_absolute_and_protocol_relative_addresses():
    page = """<link href="/static/a.css"><script src='https://cdn.example.org/x.js'></script>
    <img src=//cdn.example.org/y.png><a href = "HTTP://example.org/">"""
    assert [m[2] for m in OFF_SITE.findall(page)] == [
        "https://cdn.example.org/x.js",
        "//cdn.example.org/y.png",
        "HTTP://example.org/",
    ]
    # A random token that happens to contain "cdn" is not an address.
    assert OFF_SITE.findall('<input name="csrfmiddlewaretoken" value="aCdNx9">') == []


def test_the_schema_generator_finds_nothing_to_warn_about(tmp_path):
    from django.core.management import call_command

    call_command("spectacular", "--fail-on-warn", "--file", str(tmp_path / "schema.yaml"))
    schema = (tmp_path / "schema.yaml").read_text()
    assert "/api/v1/workers/heartbeat" in schema and "HeartbeatAnswer" in schema
