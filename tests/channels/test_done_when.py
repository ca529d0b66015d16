"""The issue's "Done when": a new user goes from ``klique login`` to a running task and sees why
it waits. Everything is real: the server on a real port, the ``klique`` executable, the engine's
passes (``apps.engine.services.run_pass``) deciding and writing the verdict, and a worker speaking
the worker API (enrol, claim, started, exited) over HTTP."""

from decimal import Decimal

import pytest
from django.utils import timezone

from apps.engine import services as engine
from apps.pools import services as pools
from apps.pools.models import EnrolmentToken, Pool
from apps.tasks import services as tasks
from apps.tasks.models import Task
from klique.worker.client import ControlPlane
from tests.channels.conftest import token_for
from tests.channels.live import Follower, cli_env, klique

pytestmark = pytest.mark.django_db(transaction=True)
NO_ROOM = "No room for its size in its pools (onprem): their declared capacity is in use."


def test_a_new_user_goes_from_login_to_a_running_task_and_sees_why_it_waits(live_server, estate, tmp_path):
    # The estate: one pool of one GPU, served by one worker daemon, already busy with Speech's work.
    Pool.objects.filter(pk=estate.pool.pk).update(capacity=Decimal("1"))
    enrolment = pools.issue_enrolment_token(EnrolmentToken(pool=estate.pool, name="rack"), now=timezone.now())
    worker = ControlPlane(live_server.url)
    worker.enrol(enrolment, hostname="node-1", gpus="1", mode="process")
    speech = tasks.submit(user=estate.lead, compute_resource=estate.speech_a100, command="sleep 600")
    assert engine.run_pass().placed == 1
    assert [t["id"] for t in worker.claim({"free_gpus": "1", "max_tasks": 4})] == [speech.pk]
    worker.report(speech.pk, "started", {})

    # A new user logs in with the token made on the portal's token page.
    env = cli_env(tmp_path)
    login = klique(
        env, "login", "--url", live_server.url, "--token", "-", stdin=token_for(estate.member) + "\n"
    )
    assert login.returncode == 0 and "as vera: Vision (member)" in login.stdout, login.stderr

    # They submit and follow the task: first in line, before the engine has seen it.
    follower = Follower(env, "submit", "vision/a100", "--wait", "--poll", "0.1", "--", "python", "train.py")
    task_id = int(follower.expect("Submitted task").split()[2])
    follower.expect(f"task {task_id}: queued at position 1, waiting for the engine's next pass")

    # The engine's pass finds no room and says so; the status line shows the engine's verdict.
    record = engine.run_pass()
    assert (record.placed, record.preempted, record.waiting) == (0, 0, 1)
    assert follower.expect("queued at position 1:") == f"task {task_id}: queued at position 1: {NO_ROOM}"
    assert Task.objects.get(pk=task_id).verdict["rule"] == "no_capacity"
    status = klique(env, "status", str(task_id))
    assert status.returncode == 0 and f"why waiting       {NO_ROOM}" in status.stdout

    # Speech's work ends on the worker: the capacity frees, and the next pass places the task.
    worker.report(speech.pk, "exited", {"exit_code": 0})
    assert engine.run_pass().placed == 1
    follower.expect(f"task {task_id}: placed on pool onprem, waiting for a worker to start it")

    # The worker claims it and reports it started: the user sees it running on the pool.
    assert [t["id"] for t in worker.claim({"free_gpus": "1", "max_tasks": 4})] == [task_id]
    worker.report(task_id, "started", {})
    follower.expect(f"task {task_id}: running on pool onprem")

    worker.report(task_id, "exited", {"exit_code": 0})
    follower.expect(f"task {task_id}: succeeded (exit code 0)")
    assert follower.exit_code() == 0
    events = Task.objects.get(pk=task_id).events.order_by("pk")
    assert [e.kind for e in events] == ["submitted", "verdict", "placed", "claimed", "started", "succeeded"]
    assert (events[1].reason, events[1].detail["message"]) == ("no_capacity", NO_ROOM)
