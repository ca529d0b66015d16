"""How large a task may be, at every way in (docs/channels.md, "Limits"): a command of at most
``MAX_COMMAND_CHARS`` characters and a spec of at most ``MAX_SPEC_BYTES`` bytes as JSON, through
the API, the portal's submit form, schedules, the admin, MCP's own schema and the service layer
under them all. A larger one is refused naming the field, and nothing is written."""

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from apps.tasks import limits, services
from apps.tasks.models import Schedule, Task
from tests.channels.conftest import client_for
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db

TOO_LONG = "x" * (limits.MAX_COMMAND_CHARS + 1)
LONGEST = "x" * limits.MAX_COMMAND_CHARS
TOO_LARGE_SPEC = {"env": {"DATA": "x" * limits.MAX_SPEC_BYTES}}


def submission(estate, **extra) -> dict:
    return {"compute_resource": estate.vision_a100.name, "command": "train", **extra}


def test_the_bounds_are_20000_characters_of_command_and_64_kib_of_spec():
    assert limits.MAX_COMMAND_CHARS == 20_000 and limits.MAX_SPEC_BYTES == 64 * 1024


@pytest.mark.parametrize(
    ("extra", "field"), [({"command": TOO_LONG}, "command"), ({"spec": TOO_LARGE_SPEC}, "spec")]
)
def test_the_api_refuses_a_task_or_schedule_above_the_bounds_naming_the_field(estate, extra, field):
    client = client_for(estate.member)
    answer = client.post("/api/v1/tasks/", submission(estate, **extra), format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.content
    schedule = {"name": "nightly", "cron": "0 2 * * *", **submission(estate, **extra)}
    answer = client.post("/api/v1/schedules/", schedule, format="json")
    assert answer.status_code == 400 and field in answer.json(), answer.content
    assert not Task.objects.exists() and not Schedule.objects.exists()


def test_the_api_takes_a_command_and_spec_at_the_bounds(estate):
    spec = {"env": {"DATA": ""}}
    spec["env"]["DATA"] = "x" * (limits.MAX_SPEC_BYTES - limits.spec_bytes(spec))
    assert limits.spec_bytes(spec) == limits.MAX_SPEC_BYTES
    answer = client_for(estate.member).post(
        "/api/v1/tasks/", submission(estate, command=LONGEST, spec=spec), format="json"
    )
    assert answer.status_code == 201, answer.content


def test_a_spec_is_measured_in_utf8_bytes_not_characters(estate):
    spec = {"env": {"DATA": "é" * (limits.MAX_SPEC_BYTES // 2)}}
    assert limits.spec_error(spec) is not None
    answer = client_for(estate.member).post("/api/v1/tasks/", submission(estate, spec=spec), format="json")
    assert answer.status_code == 400 and "spec" in answer.json()


def test_the_portal_form_refuses_a_million_characters_with_a_field_error(client, estate):
    client.force_login(estate.member)
    answer = client.post(
        "/work/", {"compute_resource": estate.vision_a100.pk, "command": "x" * 1_000_000, "name": "big"}
    )
    assert answer.status_code == 400
    errors = answer.context["form"].errors
    assert list(errors) == ["command"] and "at most 20000 characters" in errors["command"][0]
    assert not Task.objects.exists()


def test_the_admin_refuses_a_task_above_the_bounds_with_a_field_error(client, estate):
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    form = {
        "user": estate.member.pk,
        "compute_resource": estate.vision_a100.pk,
        "command": "x" * 1_000_000,
        "spec": "{}",
        "channel": "admin",
        "events-TOTAL_FORMS": "0",
        "events-INITIAL_FORMS": "0",
    }
    answer = client.post(reverse("admin:tasks_task_add"), form)
    assert answer.status_code == 200 and "command" in answer.context["adminform"].form.errors
    form.update(command="train", spec='{"env": {"DATA": "' + "x" * limits.MAX_SPEC_BYTES + '"}}')
    answer = client.post(reverse("admin:tasks_task_add"), form)
    assert answer.status_code == 200 and "spec" in answer.context["adminform"].form.errors
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("extra", "field"), [({"command": TOO_LONG}, "command"), ({"spec": TOO_LARGE_SPEC}, "spec")]
)
def test_the_service_layer_refuses_what_every_channel_refuses(estate, extra, field):
    fields = {"command": "train", "spec": {}, **extra}
    with pytest.raises(ValidationError) as refused:
        services.submit(user=estate.member, compute_resource=estate.vision_a100, **fields)
    assert field in refused.value.message_dict
    with pytest.raises(ValidationError) as refused:
        services.create_schedule(
            owner=estate.member, name="n", cron="0 2 * * *", compute_resource=estate.vision_a100, **fields
        )
    assert field in refused.value.message_dict
    assert not Task.objects.exists() and not Schedule.objects.exists()


def test_a_schedule_cannot_be_changed_above_the_bounds(estate):
    schedule = services.create_schedule(
        owner=estate.member, name="n", cron="0 2 * * *", compute_resource=estate.vision_a100, command="t"
    )
    answer = client_for(estate.member).patch(
        f"/api/v1/schedules/{schedule.pk}/", {"command": TOO_LONG}, format="json"
    )
    assert answer.status_code == 400 and "command" in answer.json()
    with pytest.raises(ValidationError):
        services.update_schedule(schedule, spec=TOO_LARGE_SPEC)
    schedule.refresh_from_db()
    assert schedule.command == "t" and schedule.spec == {}


def test_mcp_bounds_the_command_as_the_api_does():
    """``klique mcp`` imports no Django, so it states the bound itself: the same number."""
    from klique.client.mcp_server import build_server

    server = build_server(client=None)
    tools = {tool.name: tool for tool in server._tool_manager.list_tools()}
    command = tools["submit_task"].parameters["properties"]["command"]
    assert command["maxLength"] == limits.MAX_COMMAND_CHARS
