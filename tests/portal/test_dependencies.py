"""Rule 2 (dependencies) on the portal: the submit form's "runs after" (task ids; after_ok, or
after_any with "whatever their end"), refusals on the field, and the task page listing what it
runs after and what runs after it, each linked with its state; a task canceled because one it ran
after did not succeed says so."""

import pytest

from apps.policies.models import ComputeResource
from apps.tasks.models import Task, TaskDependency
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db


def post(login, **fields):
    resource = ComputeResource.objects.get(name="pretraining/gpu-flex")
    form = {"compute_resource": resource.pk, "command": "train", "gpus": "1", **fields}
    return login("dev-pretraining").post("/work/", form)


def test_dependencies_the_form_submits_after_ok_or_after_any(login):
    first = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1")
    second = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1")
    assert post(login, after=f"{first.pk}, {second.pk}", name="ok").status_code == 302
    assert post(login, after=str(first.pk), after_any="on", name="any").status_code == 302
    ok, any_ = Task.objects.get(name="ok"), Task.objects.get(name="any")
    assert sorted(TaskDependency.objects.filter(task=ok).values_list("needs_id", "kind")) == [
        (first.pk, "after_ok"),
        (second.pk, "after_ok"),
    ]
    assert list(TaskDependency.objects.filter(task=any_).values_list("needs_id", "kind")) == [
        (first.pk, "after_any")
    ]


@pytest.mark.parametrize(
    ("typed", "words"),
    [("x, 2", "Give task ids (whole numbers) separated by commas"), ("999999", "Task 999999 is unknown")],
)
def test_dependencies_bad_ids_are_refused_on_the_runs_after_field(login, typed, words):
    response = post(login, after=typed)
    assert response.status_code == 400
    assert f"Runs after: {words}" in response.content.decode()
    assert not Task.objects.exists()


def test_dependencies_another_users_task_is_refused(login):
    theirs = submit("dev-alignment", "alignment/a100-1")
    response = post(login, after=str(theirs.pk))
    assert response.status_code == 400
    assert f"Runs after: Task {theirs.pk} is unknown (or not yours)." in response.content.decode()


def test_dependencies_the_task_page_links_both_ends_with_their_states(login):
    first = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1", name="prep")
    after = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1", after_ok=[first.pk])
    client = login("dev-pretraining")
    page = client.get(f"/work/tasks/{after.pk}/").content.decode()
    assert (
        f'<a href="/work/tasks/{first.pk}/">task {first.pk}</a> (prep): Waiting, runs if it succeeds' in page
    )
    upstream = client.get(f"/work/tasks/{first.pk}/").content.decode()
    assert (
        f'<dd id="task-dependants"><a href="/work/tasks/{after.pk}/">task {after.pk}</a>: Waiting</dd>'
        in upstream
    )


def test_dependencies_a_task_canceled_for_a_failed_dependency_says_why(login):
    first = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1")
    after = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1", after_ok=[first.pk])
    Task.objects.filter(pk=after.pk).update(
        state=Task.State.CANCELED, stop_reason=Task.StopReason.DEPENDENCY_FAILED
    )
    client = login("dev-pretraining")
    page = client.get(f"/work/tasks/{after.pk}/").content.decode()
    assert "A task it runs after did not succeed" in page
    assert "A task it runs after did not succeed" in client.get("/work/").content.decode()
