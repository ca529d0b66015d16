"""A developer's work: waiting with the place in line and the engine's reason, running with pool,
since when and borrowed capacity, requeued with the reason, done; submitting and cancelling."""

from decimal import Decimal

import pytest
from django.utils import timezone

from apps.engine.services import run_pass
from apps.policies import services as policies
from apps.policies.models import ResourcePolicy
from apps.portal import selectors
from apps.tasks import services as lifecycle
from apps.tasks.models import Task
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db


def test_a_submitted_task_is_shown_waiting_with_its_place_in_line(login):
    submit("dev-agents", "agents/gpu-flex", gpus="2")
    client = login("dev-pretraining")
    response = client.post(
        "/work/",
        {
            "compute_resource": _resource_id("pretraining/h100-8"),
            "command": "python train.py",
            "name": "run-1",
        },
    )
    assert response.status_code == 302
    task = Task.objects.get(name="run-1")
    assert task.channel == "portal" and task.user.username == "dev-pretraining" and task.gpus == Decimal("8")
    page = client.get("/work/").content.decode()
    assert f"Task {task.pk} submitted to pretraining/h100-8: number 1 in line." in page
    assert "Waiting for the engine&#x27;s next pass." in page


def test_the_engines_reason_is_shown_next_to_the_place_in_line(login):
    policies.update_policy(ResourcePolicy.objects.get(group__slug="agents"), reservation=0, limit=1)
    task = submit("dev-agents", "agents/gpu-flex", gpus="1")
    blocked = submit("dev-agents", "agents/gpu-flex", gpus="1")
    run_pass()
    page = login("dev-agents").get("/work/").content.decode()
    assert Task.objects.get(pk=task.pk).state == Task.State.PLACED
    assert Task.objects.get(pk=blocked.pk).verdict["message"] in page
    assert "at its limit" in Task.objects.get(pk=blocked.pk).verdict["message"]


def test_running_work_shows_its_pool_and_the_gpus_on_borrowed_capacity(login):
    # Ranking reserves 16; the third 8-GPU task runs on borrowed GPUs.
    first, second, third = (submit("dev-ranking", "ranking/gpu-flex", gpus="8") for _ in range(3))
    run_pass()
    borrowed = selectors.borrowed_gpus()
    assert [borrowed[t.pk] for t in (first, second, third)] == [0, 0, 8]
    detail = login("dev-ranking").get(f"/work/tasks/{third.pk}/").content.decode()
    assert "8 GPUs on borrowed capacity" in detail


def test_requeued_work_shows_the_reason(login):
    task = submit("dev-agents", "agents/gpu-flex", gpus="1")
    run_pass()
    lifecycle.request_stop_many([Task.objects.get(pk=task.pk)], Task.StopReason.RECLAIM, timezone.now())
    page = login("dev-agents").get("/work/?f-where=requeued").content.decode()
    assert "requeued" in page and "Requeued: Reclaimed for a reservation." in page


@pytest.mark.parametrize(
    "data, message",
    [
        ({"gpus": "2"}, "Profile h100-8 has a fixed size of 8 GPUs; leave GPUs empty."),
        ({"command": ""}, "Command: This field is required."),
        ({"gpus": "0.1234"}, "GPUs: Ensure that there are no more than 3 decimal places."),
    ],
)
def test_a_bad_submission_is_refused_on_the_form_with_the_reason(login, data, message):
    form = {"compute_resource": _resource_id("pretraining/h100-8"), "command": "python train.py"} | data
    response = login("dev-pretraining").post("/work/", form)
    assert response.status_code == 400
    assert message in response.content.decode()
    assert not Task.objects.exists()


def test_a_developer_may_not_submit_to_another_groups_compute_resource(login):
    response = login("dev-pretraining").post(
        "/work/", {"compute_resource": _resource_id("agents/gpu-flex"), "command": "x"}
    )
    assert response.status_code == 400 and "Select a valid choice" in response.content.decode()
    assert not Task.objects.exists()


def test_the_owner_cancels_a_task_and_another_member_is_refused(login):
    task = submit("dev-pretraining", "pretraining/h100-8")
    assert login("dev-alignment").post(f"/work/tasks/{task.pk}/cancel/").status_code == 403
    assert Task.objects.get(pk=task.pk).state == Task.State.QUEUED
    assert login("dev-pretraining").post(f"/work/tasks/{task.pk}/cancel/").status_code == 302
    assert Task.objects.get(pk=task.pk).state == Task.State.CANCELED


def test_my_work_lists_only_my_tasks_in_the_page_and_its_csv(login):
    mine = submit("dev-pretraining", "pretraining/h100-8", name="mine")
    submit("dev-alignment", "alignment/a100-1", name="theirs")
    client = login("dev-pretraining")
    assert "theirs" not in client.get("/work/").content.decode()
    export = client.get("/work/?export=csv&table=tasks")
    assert export["Content-Type"].startswith("text/csv")
    lines = export.content.decode().splitlines()
    assert lines[0].startswith("Task,Name,Compute resource,GPUs,State,Place in line")
    assert len(lines) == 2 and lines[1].startswith(f"{mine.pk},mine,pretraining/h100-8,8.000,waiting,1")


def test_a_used_up_budget_marks_the_compute_resource_with_its_reset(login):
    policies.update_policy(ResourcePolicy.objects.get(group__slug="agents"), budget_hours=0)
    page = login("dev-agents").get("/work/").content.decode()
    assert "over budget until" in page


def _resource_id(name: str) -> int:
    from apps.policies.models import ComputeResource

    return ComputeResource.objects.get(name=name).pk
