"""Rules 1 and 5 (issue 35) on the worker protocol: a claimed task carries the running seconds it
has left before its time limit (``time_limit_s``) and its array index (``array_index``); adopted
work gets what is left of its current run; an exit reported ``timed_out`` ends the task timed out."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.tasks.models import Task, TaskArray, TaskEvent
from tests.pools.conftest import bearer

pytestmark = pytest.mark.django_db

ENROL, CLAIM, SYNC = "/api/v1/workers/enrol", "/api/v1/workers/claim", "/api/v1/workers/sync"


def claimed(client) -> dict[int, dict]:
    answer = client.post(CLAIM, {"free_gpus": "4", "max_tasks": 10}, format="json")
    assert answer.status_code == 200, answer.content
    return {task["id"]: task for task in answer.json()["tasks"]}


def test_time_limit_claim_carries_the_seconds_left_after_earlier_runs_and_the_array_index(pool, enrol, place):
    limited, earlier_runs, unlimited, used_up = place(pool, 4)
    array = TaskArray.objects.create(user=limited.user, size=3)
    Task.objects.filter(pk=limited.pk).update(time_limit_s=600, array=array, array_index=2)
    Task.objects.filter(pk=earlier_runs.pk).update(time_limit_s=600, ran_s=450)
    Task.objects.filter(pk=used_up.pk).update(time_limit_s=600, ran_s=600)
    _, client = enrol()
    tasks = claimed(client)
    assert (tasks[limited.pk]["time_limit_s"], tasks[limited.pk]["array_index"]) == (600, 2)
    assert (tasks[earlier_runs.pk]["time_limit_s"], tasks[earlier_runs.pk]["array_index"]) == (150, None)
    assert (tasks[unlimited.pk]["time_limit_s"], tasks[unlimited.pk]["array_index"]) == (None, None)
    assert tasks[used_up.pk]["time_limit_s"] == 1  # at least 1: the daemon stops it at once


def test_time_limit_sync_claim_carries_it_too(pool, enrol, place):
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(time_limit_s=90, ran_s=30, array_index=0)
    _, client = enrol()
    answer = client.post(SYNC, {"claim": {"free_gpus": "1"}}, format="json")
    assert answer.status_code == 200, answer.content
    [got] = answer.json()["tasks"]
    assert (got["time_limit_s"], got["array_index"]) == (60, 0)


def test_time_limit_adopted_work_gets_what_is_left_of_its_current_run(pool, enrolment, enrol, place):
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(time_limit_s=1000, ran_s=100)
    _, client = enrol(hostname="node-1", mode="docker")
    claimed(client)
    client.post(f"/api/v1/workers/tasks/{task.pk}/started", {}, format="json")
    Task.objects.filter(pk=task.pk).update(started_at=timezone.now() - timedelta(seconds=300))
    answer = bearer(enrolment[1]).post(
        ENROL, {"hostname": "node-1", "gpus": "4", "mode": "docker", "running": [task.pk]}, format="json"
    )
    assert answer.status_code == 201, answer.content
    [adopted] = answer.json()["adopted"]
    assert 598 <= adopted["time_limit_s"] <= 600  # 1000 - 100 earlier - about 300 of this run


def test_time_limit_an_exit_reported_timed_out_ends_the_task_timed_out(pool, enrol, place):
    (task,) = place(pool)
    Task.objects.filter(pk=task.pk).update(time_limit_s=3600)
    _, client = enrol()
    claimed(client)
    client.post(f"/api/v1/workers/tasks/{task.pk}/started", {}, format="json")
    body = {"exit_code": 143, "timed_out": True, "log_tail": "stopped at the limit"}
    answer = client.post(f"/api/v1/workers/tasks/{task.pk}/exited", body, format="json")
    assert answer.status_code == 200, answer.content
    assert answer.json()["state"] == Task.State.TIMED_OUT
    task.refresh_from_db()
    assert task.exit_code == 143 and task.events.filter(kind=TaskEvent.Kind.TIMED_OUT).exists()


def test_time_limit_a_timed_out_exit_in_a_sync_ends_it_timed_out_and_a_plain_failure_fails(
    pool, enrol, place
):
    limited, other = place(pool, 2)
    Task.objects.filter(pk__in=[limited.pk, other.pk]).update(time_limit_s=3600)
    _, client = enrol()
    claimed(client)
    reports = [{"task": pk, "what": "started", "body": {}} for pk in (limited.pk, other.pk)] + [
        {"task": limited.pk, "what": "exited", "body": {"exit_code": 143, "timed_out": True}},
        {"task": other.pk, "what": "exited", "body": {"exit_code": 1}},
    ]
    answer = client.post(SYNC, {"reports": reports}, format="json")
    assert answer.status_code == 200, answer.content
    states = [report.get("state") for report in answer.json()["reports"][2:]]
    assert states == [Task.State.TIMED_OUT, Task.State.FAILED]


def test_time_limit_timed_out_must_be_a_boolean(pool, enrol, place):
    (task,) = place(pool)
    _, client = enrol()
    claimed(client)
    body = {"exit_code": 143, "timed_out": "yes"}
    answer = client.post(f"/api/v1/workers/tasks/{task.pk}/exited", body, format="json")
    assert answer.status_code == 400 and "timed_out" in answer.json()
