"""Never fits is refused at every way in: the API (one task and bulk), schedules, the CLI (exit 5,
bad input) and MCP (a tool error), each naming the field, the size and the largest pool."""

from decimal import Decimal

import pytest

from apps.tasks.models import Schedule, Task
from tests.channels.conftest import token_for
from tests.channels.live import klique, logged_in
from tests.channels.test_mcp import talk

# The estate's a100 profiles list one pool, onprem; shrunk to 2 GPUs, a task of 3 never fits.
NEVER_FITS = "3 GPUs never fit: the largest pool of profile a100-any is onprem (2 GPUs)."


@pytest.fixture
def shrunk(estate):
    estate.pool.capacity = Decimal(2)
    estate.pool.save()
    return estate


def body(**fields):
    return {"compute_resource": "vision/a100-any", "command": "train", "gpus": "3", **fields}


@pytest.mark.django_db
def test_the_api_answers_400_on_gpus_naming_the_size_and_the_largest_pool(shrunk, api):
    response = api(shrunk.member).post("/api/v1/tasks/", body(), format="json")
    assert response.status_code == 400
    assert response.json() == {"gpus": [NEVER_FITS]}
    assert not Task.objects.exists()


@pytest.mark.django_db
def test_bulk_answers_400_naming_the_item_and_the_field_and_creates_nothing(shrunk, api):
    items = [body(gpus="2"), body(), body(gpus="1")]
    response = api(shrunk.member).post("/api/v1/tasks/bulk/", {"tasks": items}, format="json")
    assert response.status_code == 400
    assert response.json() == {"tasks": {"1": {"gpus": [NEVER_FITS]}}}
    assert not Task.objects.exists()


@pytest.mark.django_db
def test_a_schedule_whose_task_never_fits_answers_400(shrunk, api):
    schedule = {**body(), "name": "nightly", "cron": "0 2 * * *"}
    response = api(shrunk.member).post("/api/v1/schedules/", schedule, format="json")
    assert response.status_code == 400
    assert response.json() == {"gpus": [NEVER_FITS]}
    assert not Schedule.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_the_cli_exits_5_bad_input_naming_the_field(live_server, shrunk, tmp_path):
    env = logged_in(tmp_path, live_server.url, token_for(shrunk.member))
    result = klique(env, "submit", "vision/a100-any", "--gpus", "3", "--", "train")
    assert result.returncode == 5
    assert f"gpus: {NEVER_FITS}" in result.stderr
    assert not Task.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_mcp_returns_a_tool_error_naming_the_field(live_server, shrunk):
    async def calls(client):
        return await client.call_tool(
            "submit_task", {"compute_resource": "vision/a100-any", "command": "train", "gpus": "3"}
        )

    refused = talk(live_server, token_for(shrunk.member), calls)
    assert refused.is_error
    assert f"Refused (400): gpus: {NEVER_FITS}" in refused.content[0].text
    assert not Task.objects.exists()
