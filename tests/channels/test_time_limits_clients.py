"""Rule 1 (time limits) through the clients against a live server: ``klique submit --time`` (a
duration parsed in one place, ``klique.durations``), ``klique status`` showing the limit and the
time left, ``--wait`` ending 10 on a timed-out task, the SDK's ``submit(time_limit_s=...)`` and the
MCP tool's ``time_limit_s``; a limit above the maximum is refused naming ``time_limit_s``."""

import json
from datetime import timedelta

import pytest

from apps.tasks.models import Task
from klique.client import Client, InvalidRequest
from klique.durations import DurationError, parse_duration
from tests.channels.conftest import token_for
from tests.channels.live import Follower, klique, logged_in
from tests.channels.test_mcp import talk


@pytest.fixture
def limited(estate):
    """vision/a100: default 1 h, at most 4 h."""
    profile = estate.vision_a100.profile
    profile.default_time_limit_s, profile.max_time_limit_s = 3600, 4 * 3600
    profile.save()
    return estate


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("3600", 3600), ("90m", 5400), ("2h30m", 9000), ("2h 30m", 9000), ("1d", 86400), ("45s", 45)]
    + [("2:30:00", 9000), ("1D2H", 93600)],
)
def test_time_limits_a_duration_is_parsed_in_one_place(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "0", "1.5h", "30m2h", "h", "2 hours", "-5", "１h"])
def test_time_limits_a_bad_duration_says_what_is_accepted(text):
    with pytest.raises(DurationError):
        parse_duration(text)


@pytest.mark.django_db(transaction=True)
def test_time_limits_cli_submit_takes_time_and_status_shows_limit_and_time_left(
    live_server, limited, tmp_path
):
    env = logged_in(tmp_path, live_server.url, token_for(limited.member))
    given = klique(env, "submit", "vision/a100", "--time", "2h30m", "--json", "--", "train")
    default = klique(env, "submit", "vision/a100", "--json", "--", "train")
    assert given.returncode == default.returncode == 0, given.stderr
    task_id = json.loads(given.stdout)["id"]
    assert json.loads(given.stdout)["time_limit_s"] == 9000
    assert json.loads(default.stdout)["time_limit_s"] == 3600
    status = klique(env, "status", str(task_id))
    assert status.returncode == 0
    assert "time limit        2 h 30 min (2 h 30 min left)" in status.stdout
    above = klique(env, "submit", "vision/a100", "--time", "5h", "--", "train")
    assert above.returncode == 5
    assert "time_limit_s: Time limit 5 h (18000 s) is above the maximum" in above.stderr
    bad = klique(env, "submit", "vision/a100", "--time", "soon", "--", "train")
    assert bad.returncode == 2 and "is not a duration" in bad.stderr
    resources = klique(env, "resources")
    assert "60 min (at most 4 h)" in resources.stdout


@pytest.mark.django_db(transaction=True)
def test_time_limits_a_timed_out_task_reads_as_such_and_wait_exits_10(live_server, limited, tmp_path):
    env = logged_in(tmp_path, live_server.url, token_for(limited.member))
    task_id = json.loads(klique(env, "submit", "vision/a100", "--json", "--", "train").stdout)["id"]
    follower = Follower(env, "status", str(task_id), "--wait", "--poll", "0.2")
    follower.expect("queued")
    Task.objects.filter(pk=task_id).update(
        state=Task.State.TIMED_OUT, stop_reason=Task.StopReason.TIME_LIMIT, ran_s=3600
    )
    follower.expect("timed out: stopped at its time limit (60 min)")
    assert follower.exit_code() == 10
    status = klique(env, "status", str(task_id))
    assert f"task {task_id}: timed out: stopped at its time limit (60 min)" in status.stdout
    assert "time limit        60 min (ran 60 min)" in status.stdout
    listed = klique(env, "ls", "--state", "timed_out", "--json")
    assert [t["id"] for t in json.loads(listed.stdout)] == [task_id]


@pytest.mark.django_db(transaction=True)
def test_time_limits_sdk_submit_takes_seconds_or_a_timedelta_and_refuses_above_the_maximum(
    live_server, limited
):
    with Client(live_server.url, token_for(limited.member)) as sdk:
        task = sdk.submit("vision/a100", "train", time_limit_s=timedelta(minutes=90))
        assert task.time_limit_s == 5400 and task.time_left_s == 5400 and task.ran_s == 0
        assert sdk.task(task.id).time_limit_s == 5400
        [resource] = [r for r in sdk.compute_resources() if r.name == "vision/a100"]
        assert (resource.default_time_limit_s, resource.max_time_limit_s) == (3600, 4 * 3600)
        with pytest.raises(InvalidRequest) as refused:
            sdk.submit("vision/a100", "train", time_limit_s=10**6)
        assert list(refused.value.errors) == ["time_limit_s"]
        schedule = sdk.create_schedule("vision/a100", "train", cron="0 2 * * *", name="n", time_limit_s=600)
        assert schedule.time_limit_s == 600
        assert sdk.update_schedule(schedule.id, time_limit_s=timedelta(minutes=20)).time_limit_s == 1200


@pytest.mark.django_db(transaction=True)
def test_time_limits_the_mcp_tool_takes_time_limit_s(live_server, limited):
    async def calls(client):
        ok = await client.call_tool(
            "submit_task", {"compute_resource": "vision/a100", "command": "train", "time_limit_s": 600}
        )
        above = await client.call_tool(
            "submit_task", {"compute_resource": "vision/a100", "command": "train", "time_limit_s": 10**6}
        )
        return ok, above

    ok, above = talk(live_server, token_for(limited.member), calls)
    assert not ok.is_error and Task.objects.get().time_limit_s == 600
    assert above.is_error and "time_limit_s: Time limit" in above.content[0].text
