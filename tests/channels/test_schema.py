"""schemathesis against ``/api/schema/`` with all its checks, on the user API (as a member with a
personal token) and the worker API (with a pool's enrolment token and a worker token): generated
requests, valid and invalid, never get a 5xx and every answer (status, content type, headers,
body) is the one the schema documents. Bounded by ``max_examples`` and derandomized, so that it
is the same run each time and finishes in well under a minute per API."""

import csv
import io
import re
from decimal import Decimal

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rest_framework import serializers
from schemathesis.checks import CHECKS, load_all_checks
from schemathesis.config import SchemathesisConfig

from apps.pools import services as pools
from apps.pools.models import EnrolmentToken
from apps.tasks import services
from apps.workers import services as protocol
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
    worker, worker_token = protocol.enrol(
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


# A write's 400, and the usage report's, may also answer a request the schema calls valid, but only
# for what a schema cannot state (``CANNOT_STATE`` below, checked on every such 400). Everything
# else must accept every request its schema calls valid.
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


# What a schema cannot state, and so the only reasons a 400 may give to a request its schema calls
# valid (docs/channels.md, "What the schema states"). Any other reason is a refusal the schema
# should have described: a blank required text, an empty bulk, a fourth decimal, a missing or
# doubled slots/free_gpus, NUL in a text field, a report choice.
CANNOT_STATE = [
    # a name that must exist and be visible to you
    r"^Unknown (compute resource|session kind|group|project|user|pool|GPU type|priority class) ",
    # the compute resource's maximum priority
    r"^Priority -?\d+ is above the maximum: ",
    # the compute resource's maximum time limit; tasks a task runs after: yours, ended how, earlier
    # items of a bulk request, both lists together (issue 35)
    r"^Time limit .* is above the maximum on ",
    r"^Task \d+ (is unknown \(or not yours\)\.|is named twice\.|ended .*, so this task could never run\.)$",
    r"^Item \d+ (is not an earlier item of this request|is named twice)|^Name earlier items ",
    r"^At most \d+ dependencies per task\.$|^Sessions are started one at a time\.$",
    r"^No project .* in group |^Object with (slug|name)=.* does not exist\.$|^No prices in ",
    # NUL or a lone surrogate inside free-form JSON (spec, detail, gpu_stats) or an unknown key
    r"holds (a NUL character|a lone surrogate)",
    # a number inside free-form JSON past the one JSON reader's bounds
    r"^A whole number has more than \d+ digits\.$|^The number .* is out of range\.$",
    # what depends on the worker, the profile or the kind of task
    r"is more than this worker's|GPU size|whole-GPU|fraction|^A session |^Only a session ",
    r"^This field is required\.$|bulk submission takes batch",
    # a cron expression
    r"^Enter a cron expression|^This cron expression is never due\.$",
    # the report's rules between parameters, and its dates in any of the form's formats
    r"^Choose a second cut|^A level applies only|^Leaves only applies|^Start and end go with",
    r"^Choose a date between|^Enter a valid date|^A custom range needs|^The (start|end) must"
    r"|^A report covers at most",
    # not described yet: a heartbeat's session keys and sync's unknown fields
    r"^Not a task id|^Unknown field: send",
]
STATED_ELSEWHERE = re.compile("|".join(f"(?:{pattern})" for pattern in CANNOT_STATE))


def reasons(body) -> list[str]:
    if isinstance(body, dict):
        return [reason for value in body.values() for reason in reasons(value)]
    if isinstance(body, list):
        return [reason for value in body for reason in reasons(value)]
    return [str(body)]


@schemathesis.check
def valid_data_refused_only_for_what_a_schema_cannot_state(ctx, response, case):
    """A 400 to a request its schema calls valid gives only reasons from ``CANNOT_STATE``."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    try:
        given = reasons(response.json())
    except ValueError:  # the report as CSV: its errors as field,message lines
        given = [row[1].lstrip("'") for row in list(csv.reader(io.StringIO(response.text)))[1:]]
    unstated = [r for r in given if not STATED_ELSEWHERE.search(r)]
    assert not unstated, f"refused a schema-valid request for a reason the schema could state: {unstated}"
    return None


CHECKS_AND_REASONS = [*ALL_CHECKS, valid_data_refused_only_for_what_a_schema_cannot_state]


@user_api.parametrize()
@API_SETTINGS
def test_the_user_api_conforms_to_its_schema(case, credentials):
    case.call_and_validate(headers=credentials[part_of(case.path)], checks=CHECKS_AND_REASONS)


@worker_api.parametrize()
@API_SETTINGS
def test_the_worker_api_conforms_to_its_schema(case, credentials):
    case.call_and_validate(headers=credentials[part_of(case.path)], checks=CHECKS_AND_REASONS)


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


# What a generated client knows before it asks: each refusal below is stated in the schema by the
# field that enforces it (one owner: the serializer field or form, not a hand-written schema).


@pytest.fixture(scope="module")
def components():
    from drf_spectacular.generators import SchemaGenerator

    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def test_a_text_field_that_refuses_blank_says_min_length_1_in_requests_only(components):
    submit, enrol, schedule = (
        components[n]["properties"] for n in ("SubmitRequest", "EnrolRequest", "ScheduleDetailRequest")
    )
    assert submit["compute_resource"]["minLength"] == 1 and submit["command"]["minLength"] == 1
    assert enrol["hostname"]["minLength"] == 1
    assert schedule["cron"]["minLength"] == 1 and schedule["name"]["minLength"] == 1
    # blank allowed: no minLength; an answer's text may be empty
    assert "minLength" not in str(submit["name"]) and "minLength" not in str(submit["project"])
    assert "minLength" not in components["Task"]["properties"]["compute_resource"]


def test_a_bulk_submission_says_one_to_tasks_bulk_max_tasks(components, settings):
    tasks = components["BulkSubmitRequest"]["properties"]["tasks"]
    assert (tasks["minItems"], tasks["maxItems"]) == (1, settings.TASKS_BULK_MAX)
    assert tasks["items"] == {"$ref": "#/components/schemas/SubmitRequest"}


def accepted(field, value) -> bool:
    try:
        field.run_validation(value)
    except serializers.ValidationError:
        return False
    return True


GPU_TEXTS = ["0", "1", "0.5", ".5", "1.", "0.125", "007.250", "9999999.999", "0.1234", "1.5000", "12345678"]
GPU_TEXTS += ["-1", "-0.5", "1e3", "1_0", "", ".", "0.0001", "1.001", "2"]


def test_a_gpu_amount_says_at_most_three_decimals_and_its_bounds(components):
    from apps.workers.api.serializers import ClaimSerializer, EnrolSerializer

    gpus = components["EnrolRequest"]["properties"]["gpus"]["oneOf"]
    number, text = gpus
    assert number == {"type": "number", "multipleOf": 0.001, "minimum": 0.0, "maximum": 9999999.999}
    assert text["type"] == "string" and text["pattern"]
    slot = components["ClaimRequest"]["properties"]["slots"]["items"]["oneOf"]
    assert slot[0] == {"type": "number", "multipleOf": 0.001, "minimum": 0.0, "maximum": 1.0}
    # the text pattern says exactly what the field takes (the field owns the rule)
    for field, pattern in (
        (EnrolSerializer().fields["gpus"], text["pattern"]),
        (ClaimSerializer().fields["slots"].child, slot[1]["pattern"]),
    ):
        for value in GPU_TEXTS:
            assert bool(re.fullmatch(pattern, value)) == accepted(field, value), (field, value)
    assert not re.fullmatch(text["pattern"], "0.1234") and re.fullmatch(text["pattern"], "0.125")


def test_a_claim_says_exactly_one_of_slots_and_free_gpus(components):
    claim = components["ClaimRequest"]
    assert claim["oneOf"] == [{"required": ["slots"]}, {"required": ["free_gpus"]}]
    assert "oneOf" not in components.get("Claim", {}), "an answer is not a claim"


def test_a_text_field_that_refuses_nul_says_so_and_one_that_cleans_it_does_not(components):
    from apps.core.schema import NOT_BLANK_WITHOUT_NUL

    for name, field in (
        ("SubmitRequest", "command"),
        ("SubmitRequest", "compute_resource"),
        ("ScheduleDetailRequest", "compute_resource"),
    ):
        # required, trimmed: neither NUL nor a text that is only whitespace (which trims to blank)
        pattern = components[name]["properties"][field]["pattern"]
        assert pattern == NOT_BLANK_WITHOUT_NUL, (name, field)
        assert re.fullmatch(pattern, "ok") and re.fullmatch(pattern, " ok ")
        assert not re.fullmatch(pattern, "a\x00b") and not re.fullmatch(pattern, " \u2003\t")
    log_tail = components["ExitedRequest"]["properties"]["log_tail"]
    assert "pattern" not in log_tail, "a log tail's NUL is stored as U+FFFD, not refused"


def test_an_enrolment_states_the_host_name_rule_and_a_wait_its_bounds(components):
    from django.conf import settings as django_settings

    from klique.worker.hostnames import HOSTNAME_PATTERN, MAX_HOSTNAME_CHARS

    hostname = components["EnrolRequest"]["properties"]["hostname"]
    assert (hostname["pattern"], hostname["maxLength"]) == (HOSTNAME_PATTERN, MAX_HOSTNAME_CHARS)
    wait = components["WaitRequest"]["properties"]["timeout_s"]
    assert (wait["type"], wait["minimum"], wait["exclusiveMinimum"]) == ("number", 0, True)
    assert wait["maximum"] == django_settings.WORKER_WAIT_MAX_S


@given(st.text(alphabet="ab-.1_\u202e\x00", max_size=70) | st.from_regex(r"[a-z0-9-]{60,66}", fullmatch=True))
def test_the_host_name_pattern_accepts_exactly_what_enrolment_accepts(name):
    from klique.worker.hostnames import HOSTNAME_PATTERN, hostname_error

    assert bool(re.fullmatch(HOSTNAME_PATTERN, name)) == (hostname_error(name) is None), name


def test_the_usage_report_lists_the_choices_of_its_query_parameters(client):
    from django import forms

    from apps.ledger.forms import ReportForm

    schema = client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    parameters = {
        p["name"]: p["schema"] for p in schema["paths"]["/api/v1/usage/report/"]["get"]["parameters"]
    }
    choices = {
        name: field
        for name, field in ReportForm.base_fields.items()
        if isinstance(field, forms.ChoiceField) and not isinstance(field, forms.ModelChoiceField)
    }
    assert {"by", "then_by", "period", "level", "rows", "idle"} <= choices.keys()
    for name, field in choices.items():
        values = {str(value) for value, _ in field.choices} | {""}
        assert set(parameters[name]["enum"]) == values, name
        form = ReportForm({name: "not-a-choice"})
        assert not form.is_valid() and name in form.errors
