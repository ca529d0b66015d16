"""The user API's limits on request bodies (docs/channels.md, "Limits"): JSON nested deeper than
``MAX_JSON_DEPTH`` and strings holding NUL or a lone surrogate are 400 naming the problem and the
field, and a number of GPUs is plain ASCII decimal notation (no ``1_0``, no full-width digits)."""

import json
import signal

import pytest
from django.core.exceptions import RequestDataTooBig
from django.urls import reverse

from apps.core.errors import bad_request
from apps.core.parsers import MAX_JSON_DEPTH
from apps.tasks.models import Schedule, Task
from tests.channels.conftest import client_for
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

TASKS, SCHEDULES = "/api/v1/tasks/", "/api/v1/schedules/"


def nested(depth: int) -> str:
    """A JSON body ``{"spec": {"a": [[...]]}}`` whose deepest value sits ``depth`` levels down."""
    return '{"spec": {"a": ' + "[" * (depth - 2) + "1" + "]" * (depth - 2) + "}}"


def post_raw(client, url, text: str):
    return client.post(url, data=text, content_type="application/json")


def submission(estate, **extra) -> dict:
    return {"compute_resource": estate.vision_a100.name, "command": "train", **extra}


def schedule_body(estate, **extra) -> dict:
    return {"name": "n", "cron": "0 2 * * *", **submission(estate), **extra}


@pytest.mark.parametrize("url", [TASKS, SCHEDULES])
def test_json_nested_deeper_than_the_bound_is_400_naming_the_nesting(estate, url):
    answer = post_raw(client_for(estate.member), url, nested(1000))
    assert answer.status_code == 400, answer.content
    assert "nested deeper than 64" in answer.json()["detail"]
    assert Task.objects.count() == 0 and Schedule.objects.count() == 0


def test_json_nested_exactly_to_the_bound_is_parsed(estate):
    body = submission(estate)
    text = json.dumps(body)[:-1] + ', "spec": {"a": ' + nested(MAX_JSON_DEPTH)[len('{"spec": {"a": ') :]
    answer = post_raw(client_for(estate.member), TASKS, text)
    assert answer.status_code == 201, answer.content
    answer = post_raw(client_for(estate.member), TASKS, text.replace("[", "[[", 1).replace("]", "]]", 1))
    assert answer.status_code == 400 and "nested deeper" in answer.json()["detail"]


def test_brackets_inside_strings_do_not_count_as_nesting(estate):
    spec = {"args": '\\"' + "[" * 1000 + '{"', "x": "]" * 5}
    answer = post_raw(client_for(estate.member), TASKS, json.dumps(submission(estate, spec=spec)))
    assert answer.status_code == 201, answer.content
    assert Task.objects.get().spec == spec


@pytest.mark.parametrize("content_type", ["application/json", "application/x-www-form-urlencoded"])
@pytest.mark.parametrize("url", [TASKS, SCHEDULES])
def test_a_body_above_the_upload_limit_is_a_json_400(estate, url, content_type):
    text = json.dumps(submission(estate, command="x" * 3_000_000))
    answer = client_for(estate.member).generic("POST", url, text, content_type=content_type)
    assert answer.status_code == (400 if content_type == "application/json" else 415)
    assert answer["Content-Type"] == "application/json" and answer.json()["detail"]


@pytest.mark.parametrize(("path", "shape"), [("/api/v1/tasks/", "application/json"), ("/", "text/html")])
def test_a_request_django_refuses_as_too_big_answers_in_the_shape_of_its_address(rf, path, shape):
    answer = bad_request(rf.post(path), RequestDataTooBig("Request body exceeded the limit."))
    assert answer.status_code == 400 and answer["Content-Type"].startswith(shape)


@pytest.fixture
def hang_guard():
    """Turn a runaway parse into a failure (the body below took hours before its fix, 0.1 s now)."""

    def runaway(signum, frame):
        raise AssertionError("parsing one request body ran away")

    previous = signal.signal(signal.SIGALRM, runaway)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def test_an_unterminated_string_full_of_escaped_quotes_is_refused_in_linear_time(estate, hang_guard):
    body = "[" * (MAX_JSON_DEPTH + 6) + '"' + '\\"' * 1_000_000
    answer = post_raw(client_for(estate.member), TASKS, body)
    assert answer.status_code == 400


BAD_STRINGS = pytest.mark.parametrize(
    ("bad", "named"), [("\ud800", "lone surrogate"), ("\udfff", "lone surrogate"), ("\x00", "NUL")]
)


@BAD_STRINGS
@pytest.mark.parametrize("where", ["key", "value"])
@pytest.mark.parametrize("url", [TASKS, SCHEDULES])
def test_a_spec_holding_nul_or_a_lone_surrogate_is_400_naming_the_field(estate, url, where, bad, named):
    spec = {f"k{bad}": "v"} if where == "key" else {"env": {"K": f"v{bad}"}}
    body = submission(estate, spec=spec) if url == TASKS else schedule_body(estate, spec=spec)
    answer = post_raw(client_for(estate.member), url, json.dumps(body))
    assert answer.status_code == 400, answer.content
    message = answer.json()["spec"][0]
    assert named in message and "spec" in message
    assert Task.objects.count() == 0 and Schedule.objects.count() == 0


@pytest.mark.parametrize("number", ["1e999", "-1e999", "9" * 5000])
@pytest.mark.parametrize("url", [TASKS, SCHEDULES])
def test_a_number_out_of_range_is_400_not_a_database_error(estate, url, number):
    body = submission(estate, spec={"a": 0}) if url == TASKS else schedule_body(estate, spec={"a": 0})
    answer = post_raw(client_for(estate.member), url, json.dumps(body).replace('"a": 0', f'"a": {number}'))
    assert answer.status_code == 400, answer.content
    assert "out of range" in str(answer.json()) or "more than 30 digits" in str(answer.json())
    assert "int_max_str_digits" not in answer.content.decode()
    assert Task.objects.count() == 0 and Schedule.objects.count() == 0


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ({"env": "x"}, "spec.env must be an object"),
        ({"env": {"bad name": "x"}}, "is not a variable name"),
        ({"env": {"K": None}}, "text or a number"),
        ({"env": {"K": ["a"]}}, "text or a number"),
    ],
)
@pytest.mark.parametrize("url", [TASKS, SCHEDULES])
def test_a_spec_env_no_worker_could_use_is_400_naming_spec(estate, url, spec, reason):
    body = submission(estate, spec=spec) if url == TASKS else schedule_body(estate, spec=spec)
    answer = client_for(estate.member).post(url, body, format="json")
    assert answer.status_code == 400, answer.content
    assert reason in answer.json()["spec"][0]


def test_a_schedule_change_holding_a_lone_surrogate_is_400(estate):
    client = client_for(estate.member)
    created = client.post(SCHEDULES, schedule_body(estate), format="json")
    assert created.status_code == 201, created.content
    url = f"{SCHEDULES}{created.json()['id']}/"
    answer = client.patch(url, data=json.dumps({"spec": {"x": "\ud800"}}), content_type="application/json")
    assert answer.status_code == 400 and "spec" in answer.json(), answer.content


def test_the_api_reads_json_only_and_a_form_body_is_415(estate):
    answer = client_for(estate.member).post(TASKS, submission(estate), format="multipart")
    assert answer.status_code == 415, answer.content
    assert "multipart/form-data" in answer.json()["detail"]
    assert Task.objects.count() == 0


def test_a_paired_surrogate_escape_is_a_real_character_and_accepted(estate):
    body = submission(estate, spec={"emoji": "\U0001f600"})
    answer = post_raw(client_for(estate.member), TASKS, json.dumps(body))
    assert answer.status_code == 201, answer.content
    assert Task.objects.get().spec == {"emoji": "\U0001f600"}


LOOSE_NUMBERS = pytest.mark.parametrize("gpus", ["1_0", "0_1", "１", "٣", "1e1", "+2", " 0x1"])


@LOOSE_NUMBERS
def test_a_task_size_in_loose_notation_is_400_naming_gpus(estate, gpus):
    body = {"compute_resource": estate.vision_sized.name, "command": "train", "gpus": gpus}
    answer = client_for(estate.member).post(TASKS, body, format="json")
    assert answer.status_code == 400 and "gpus" in answer.json(), answer.content
    assert Task.objects.count() == 0


@LOOSE_NUMBERS
def test_a_schedule_size_in_loose_notation_is_400_naming_gpus(estate, gpus):
    body = schedule_body(estate, compute_resource=estate.vision_sized.name, gpus=gpus)
    answer = client_for(estate.member).post(SCHEDULES, body, format="json")
    assert answer.status_code == 400 and "gpus" in answer.json(), answer.content


@pytest.mark.parametrize("gpus", ["2", "0.5", ".5", 2, 0.5, "2.000"])
def test_plain_decimal_sizes_are_accepted(estate, gpus):
    body = {"compute_resource": estate.vision_sized.name, "command": "train", "gpus": gpus}
    answer = client_for(estate.member).post(TASKS, body, format="json")
    assert answer.status_code == 201, answer.content


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("spec", "[" * 1000 + "]" * 1000, "nested deeper than 64"),
        ("spec", '{"env": {"K": "v\\u0000"}}', "NUL"),
        ("spec", '{"k\\ud800": 1}', "lone surrogate"),
        ("gpus", "1_0", "Enter a number"),
        ("gpus", "１", "Enter a number"),
    ],
)
def test_the_admin_task_form_reads_json_and_gpus_with_the_apis_limits(client, estate, field, value, reason):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    form = {
        "user": estate.member.pk,
        "compute_resource": estate.vision_sized.pk,
        "command": "train",
        "spec": "{}",
        "channel": "admin",
        "events-TOTAL_FORMS": "0",
        "events-INITIAL_FORMS": "0",
        field: value,
    }
    answer = client.post(reverse("admin:tasks_task_add"), form)
    assert answer.status_code == 200
    errors = answer.context["adminform"].form.errors
    assert list(errors) == [field] and reason in errors[field][0], errors
    assert not Task.objects.exists()


def test_an_api_address_that_matches_no_route_is_a_json_404(estate):
    answer = client_for(estate.member).get("/api/v1/tasks/0.5/")
    assert answer.status_code == 404 and answer.json() == {"detail": "Not found."}


@pytest.mark.parametrize(
    ("query", "parameter"),
    [
        ("mine=yes", "mine"),
        ("mine=null", "mine"),
        ("submitted_before=", "submitted_before"),
        ("channel=api&channel=cli", "channel"),
    ],
)
def test_a_query_parameter_is_read_as_strictly_as_the_schema_states(estate, query, parameter):
    answer = client_for(estate.member).get(f"{TASKS}?{query}")
    assert answer.status_code == 400 and parameter in answer.json(), answer.content


def test_a_plain_text_parameter_may_be_empty_and_a_state_may_repeat(estate):
    answer = client_for(estate.member).get(f"{TASKS}?compute_resource=&state=queued&state=running&mine=true")
    assert answer.status_code == 200, answer.content
