"""schemathesis against ``/api/schema/`` with all its checks, on the user API (as a member with a
personal token) and the worker API (with a pool's enrolment token and a worker token): generated
requests, valid and invalid, never get a 5xx and every answer (status, content type, headers,
body) is the one the schema documents. Bounded by ``max_examples`` and derandomized, so that it
is the same run each time and finishes in well under a minute per API."""

import re
from decimal import Decimal

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, settings
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config import SchemathesisConfig

from apps.pools import services as pools
from apps.pools.models import EnrolmentToken
from apps.tasks import services
from klique.wsgi import application
from tests.channels.conftest import token_for

pytestmark = pytest.mark.django_db
# A src= or href= whose value is an absolute (http://, https://) or protocol-relative (//host)
# address: a file the page would load from another site.
OFF_SITE = re.compile(r"""\b(src|href)\s*=\s*(["']?)((?:https?:)?//[^"'\s>]+)""", re.IGNORECASE)
load_all_checks()
ALL_CHECKS = CHECKS.get_all()


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
def credentials(estate, in_process_requests):
    """The headers for each part of the API: a member's token, the pool's enrolment token and a
    worker token (its worker holds a claimed task, so that reports find one)."""
    services.submit(user=estate.member, compute_resource=estate.vision_a100, command="train")
    services.create_schedule(
        owner=estate.member,
        name="nightly",
        cron="0 2 * * *",
        compute_resource=estate.vision_a100,
        command="x",
    )
    now = timezone.now()
    enrolment = pools.issue_enrolment_token(EnrolmentToken(pool=estate.pool, name="rack"), now=now)
    worker, worker_token = pools.enrol(
        EnrolmentToken.objects.get(),
        hostname="schemathesis-worker-0",
        gpus=Decimal(8),
        mode="process",
        now=now,
    )
    return {
        "user": {"Authorization": f"Bearer {token_for(estate.member)}"},
        "enrol": {"Authorization": f"Bearer {enrolment}"},
        "worker": {"Authorization": f"Bearer {worker_token}"},
    }


def part_of(path: str) -> str:
    if path == "/api/v1/workers/enrol":
        return "enrol"
    return "worker" if path.startswith("/api/v1/workers/") else "user"


# A write's 400 also answers what a schema cannot state: a named compute resource or project that
# does not exist or is not yours, a cron expression, NUL or lone surrogates in any string, free
# GPUs above the worker's; so does the usage report's, whose parameters name groups, projects and
# users. Everything else must accept every request its schema calls valid.
ACCEPTANCE = """
[[operations]]
include-path-regex = "{other}"
enabled = false

[[operations]]
include-method = ["POST", "PATCH"]
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404", "409", "429"]

[[operations]]
include-path = "/api/v1/usage/report/"
checks.positive_data_acceptance.expected-statuses = ["2xx", "400", "401", "403", "404"]
"""
WORKER_PATHS, USER_PATHS = "^/api/v1/workers/", "^/api/v1/(?!workers/)"
user_api, worker_api = (
    schemathesis.openapi.from_wsgi(
        "/api/schema/", application, config=SchemathesisConfig.from_str(ACCEPTANCE.format(other=other))
    )
    for other in (WORKER_PATHS, USER_PATHS)
)
API_SETTINGS = settings(
    max_examples=15, deadline=None, derandomize=True, database=None, suppress_health_check=list(HealthCheck)
)


@user_api.parametrize()
@API_SETTINGS
def test_the_user_api_conforms_to_its_schema(case, credentials):
    case.call_and_validate(headers=credentials[part_of(case.path)], checks=ALL_CHECKS)


@worker_api.parametrize()
@API_SETTINGS
def test_the_worker_api_conforms_to_its_schema(case, credentials):
    case.call_and_validate(headers=credentials[part_of(case.path)], checks=ALL_CHECKS)


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
