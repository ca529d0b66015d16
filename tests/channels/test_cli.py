"""The ``klique`` CLI against a live server on a real port: login, submit, wait, status, cancel,
tables for people and ``--json`` for scripts, and exit codes scripts can rely on."""

import json
import stat
import subprocess
import time

import pytest
from django.utils import timezone

from apps.sessions.api.work.views import TaskViewSet
from apps.tasks import services
from apps.tasks.models import Task
from tests.channels.conftest import token_for
from tests.channels.live import KLIQUE, Follower, cli_env, finish, klique, loaded, logged_in, place, preempt

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def env(live_server, estate, tmp_path):
    """A CLI logged in as the member vera."""
    return logged_in(tmp_path, live_server.url, token_for(estate.member))


def test_login_checks_the_token_and_stores_it_readable_by_the_user_only(live_server, estate, tmp_path):
    env = cli_env(tmp_path)
    token = token_for(estate.member)
    result = klique(env, "login", "--url", live_server.url, "--token", token)
    assert result.returncode == 0 and "as vera: Vision (member)" in result.stdout
    path = tmp_path / "klique" / "config.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"url": live_server.url, "token": token}


def test_login_with_a_bad_token_exits_3_and_stores_nothing(live_server, estate, tmp_path):
    env = cli_env(tmp_path)
    result = klique(env, "login", "--url", live_server.url, "--token", "kqp_wrong")
    assert result.returncode == 3 and "Unknown API token" in result.stderr
    assert not (tmp_path / "klique" / "config.json").exists()


def test_commands_before_login_exit_3(tmp_path):
    result = klique(cli_env(tmp_path), "ls")
    assert result.returncode == 3 and "klique login" in result.stderr


def test_resources_shows_a_table_and_json(env):
    table = klique(env, "resources")
    assert table.returncode == 0
    assert table.stdout.splitlines()[0].split()[:3] == ["NAME", "GROUP", "PROFILE"]
    assert "vision/a100-any" in table.stdout and "(set per task)" in table.stdout
    rows = json.loads(klique(env, "resources", "--json").stdout)
    assert {r["name"] for r in rows} == {"vision/a100", "vision/a100-any", "vision/a100-quarter"}
    assert next(r for r in rows if r["name"] == "vision/a100-quarter")["gpus"] == "0.250"


def test_submit_ls_status_and_cancel_with_json(env, estate):
    submitted = klique(
        env,
        "submit",
        "vision/a100-any",
        "--gpus",
        "2",
        "--name",
        "sweep",
        "--json",
        "--",
        "python",
        "train.py",
        "--lr",
        "0.1",
    )
    assert submitted.returncode == 0, submitted.stderr
    task = json.loads(submitted.stdout)
    stored = Task.objects.get(pk=task["id"])
    assert (stored.channel, stored.user, stored.command, stored.gpus) == (
        "cli",
        estate.member,
        "python train.py --lr 0.1",
        2,
    )
    assert task["state"] == "queued" and task["queue_position"] == 1
    assert [t["id"] for t in json.loads(klique(env, "ls", "--json").stdout)] == [task["id"]]
    assert "sweep" in klique(env, "ls").stdout
    status = json.loads(klique(env, "status", str(task["id"]), "--json").stdout)
    assert status["compute_resource"] == "vision/a100-any" and status["preemptions"] == []
    canceled = klique(env, "cancel", str(task["id"]), "--json")
    assert canceled.returncode == 0 and json.loads(canceled.stdout)["state"] == "canceled"
    assert json.loads(klique(env, "ls", "--state", "queued", "--json").stdout) == []


def test_submit_wait_follows_the_task_from_its_place_in_line_to_done(env, estate):
    follower = Follower(env, "submit", "vision/a100", "--wait", "--poll", "0.1", "--", "python", "train.py")
    task_id = int(follower.expect("Submitted task").split()[2])
    follower.expect("queued at position 1, waiting for the engine's next pass")
    verdict = {"rule": "policy_limit", "message": "Vision uses 4 of its limit of 4 GPUs."}
    Task.objects.filter(pk=task_id).update(verdict=verdict)
    follower.expect("queued at position 1: Vision uses 4 of its limit of 4 GPUs.")
    place(task_id, estate.pool)
    follower.expect("placed on pool onprem")
    preempt(task_id, Task.StopReason.RECLAIM)
    follower.expect("requeued: reclaimed for another group's reservation")
    place(task_id, estate.pool)
    follower.expect("placed on pool onprem")
    finish(task_id, 0)
    follower.expect("succeeded (exit code 0)")
    assert follower.exit_code() == 0
    history = klique(env, "status", str(task_id)).stdout
    assert "preempted on onprem: reclaimed for another group's reservation" in history


def test_wait_exits_1_when_the_task_fails(env, estate):
    follower = Follower(env, "submit", "vision/a100", "--wait", "--poll", "0.1", "--", "false")
    task_id = int(follower.expect("Submitted task").split()[2])
    place(task_id, estate.pool)
    finish(task_id, 3)
    follower.expect("failed (exit code 3)")
    assert follower.exit_code() == 1


def test_status_of_a_task_that_could_not_start_shows_the_reason(env, estate):
    task = services.submit(user=estate.member, compute_resource=estate.vision_a100, command="x" * 10)
    place(task.pk, estate.pool)
    services.start_failed(
        loaded(task.pk), error="[Errno 7] Argument list too long", at=timezone.now(), attempts=1
    )
    result = klique(env, "status", str(task.pk))
    assert "failed: Could not start (1 of 1 attempts): [Errno 7] Argument list too long" in result.stdout


def test_status_wait_exits_8_when_the_task_is_canceled(env, estate):
    task = services.submit(user=estate.member, compute_resource=estate.vision_a100, command="sleep 1")
    follower = Follower(env, "status", str(task.pk), "--wait", "--poll", "0.1")
    follower.expect("queued at position 1")
    services.cancel(task, actor=estate.member)
    follower.expect("canceled")
    assert follower.exit_code() == 8


def test_wait_with_json_prints_status_lines_on_stderr_and_the_final_task_on_stdout(env, estate):
    process = subprocess.Popen(
        [KLIQUE, "submit", "vision/a100", "--wait", "--poll", "0.1", "--json", "--", "true"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 20
    while not Task.objects.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    task = Task.objects.get()
    place(task.pk, estate.pool)
    finish(task.pk, 0)
    out, err = process.communicate(timeout=20)
    assert process.returncode == 0
    assert json.loads(out)["state"] == "succeeded" and "succeeded (exit code 0)" in err


def test_refused_input_exits_5_naming_the_field(env):
    result = klique(env, "submit", "vision/a100-any", "--gpus", "-1", "--", "train")
    assert result.returncode == 5
    assert "gpus: GPUs: A number of GPUs cannot be negative." in result.stderr


def test_a_command_is_required_after_the_double_dash(env):
    assert klique(env, "submit", "vision/a100").returncode == 2
    assert klique(env, "submit", "vision/a100", "train.py").returncode == 2


def test_someone_elses_task_exits_4(env, estate):
    theirs = services.submit(user=estate.other_member, compute_resource=estate.vision_a100, command="x")
    result = klique(env, "status", str(theirs.pk))
    assert result.returncode == 4 and "No Task matches" in result.stderr


def test_an_unreachable_server_exits_6(tmp_path, estate):
    env = cli_env(tmp_path, KLIQUE_URL="http://127.0.0.1:9", KLIQUE_TOKEN=token_for(estate.member))
    result = klique(env, "ls")
    assert result.returncode == 6 and "Cannot reach Klique" in result.stderr


def test_usage_and_budget_show_the_groups_time_budget(env, estate):
    usage = klique(env, "usage")
    assert usage.returncode == 0 and "vision" in usage.stdout and "GPUS IN USE" in usage.stdout
    budget = json.loads(klique(env, "budget", "--json").stdout)
    assert [(b["group"], b["period"], b["budget_hours"]) for b in budget] == [("vision", "week", "100.000")]
    assert "RUNS OUT" in klique(env, "budget").stdout


def test_schedules_are_added_listed_paused_and_removed(env, estate):
    added = klique(
        env,
        "schedule",
        "add",
        "vision/a100",
        "--cron",
        "0 2 * * *",
        "--name",
        "nightly",
        "--json",
        "--",
        "train",
    )
    assert added.returncode == 0, added.stderr
    schedule = json.loads(added.stdout)
    assert schedule["next_run_at"].endswith("02:00:00+00:00")
    assert "nightly" in klique(env, "schedule", "ls").stdout
    assert klique(env, "schedule", "pause", str(schedule["id"])).returncode == 0
    assert "stopped: paused" in klique(env, "schedule", "ls").stdout
    assert klique(env, "schedule", "resume", str(schedule["id"])).returncode == 0
    assert klique(env, "schedule", "rm", str(schedule["id"])).returncode == 0
    assert json.loads(klique(env, "schedule", "ls", "--json").stdout) == []


def test_a_server_error_exits_7(env, monkeypatch):
    def broken(self, request):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(TaskViewSet, "list", broken)
    result = klique(env, "ls")
    assert result.returncode == 7
    assert result.stderr == "klique: HTTP 500: Server Error (500)\n"


def test_wait_exits_9_when_the_timeout_passes_before_the_task_ends(env, estate):
    started = time.monotonic()
    result = klique(
        env, "submit", "vision/a100", "--wait", "--timeout", "0.5", "--poll", "0.1", "--", "train"
    )
    assert result.returncode == 9 and "is still queued after 0.5 s" in result.stderr
    assert time.monotonic() - started < 30
    (task,) = Task.objects.all()
    assert task.state == "queued"
    follower = Follower(env, "status", str(task.pk), "--wait", "--timeout", "0.3", "--poll", "0.1")
    follower.expect("queued at position 1")
    assert follower.exit_code() == 9


def test_submit_with_a_project_charges_it_and_an_unknown_project_exits_5(env, estate):
    result = klique(env, "submit", "vision/a100", "--project", "detector", "--json", "--", "train")
    assert result.returncode == 0, result.stderr
    body = json.loads(result.stdout)
    assert body["project"] == "detector" and Task.objects.get(pk=body["id"]).project == estate.project
    assert "project           detector" in klique(env, "status", str(body["id"])).stdout
    refused = klique(env, "submit", "vision/a100", "--project", "nope", "--", "train")
    assert refused.returncode == 5 and "project:" in refused.stderr and Task.objects.count() == 1
