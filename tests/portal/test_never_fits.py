"""Never fits in the portal: the submit form refuses a task larger than the largest pool of its
profile on the field, and IT's view lists the waiting tasks whose verdict is ``never_fits``."""

import pytest

from apps.policies.models import ComputeResource
from apps.tasks.models import Task
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db

NEVER_FITS = {
    "rule": "never_fits",
    "cause": "capacity",
    "pools": ["hpc-slurm"],
    "message": "Never fits now: it is larger than the largest enabled pool of its profile (hpc-slurm). "
    "IT must raise a pool's capacity or add a larger pool.",
}


def test_the_submit_form_refuses_a_task_no_pool_of_its_profile_can_hold_on_the_gpus_field(login):
    form = {
        "compute_resource": ComputeResource.objects.get(name="pretraining/gpu-flex").pk,
        "command": "python train.py",
        "gpus": "72",
    }
    response = login("dev-pretraining").post("/work/", form)
    assert response.status_code == 400
    page = response.content.decode()
    assert "72 GPUs never fit: the largest pool of profile gpu-flex is cloud-h100 (64 GPUs)." in page
    assert not Task.objects.exists()


def test_it_sees_the_waiting_tasks_that_never_fit_with_group_size_and_cause(login):
    stuck = submit("dev-pretraining", "pretraining/h100-8")
    waiting = submit("dev-pretraining", "pretraining/h100-8")
    Task.objects.filter(pk=stuck.pk).update(verdict=NEVER_FITS)
    Task.objects.filter(pk=waiting.pk).update(verdict={"rule": "no_capacity", "message": "no room"})
    client = login("it")
    page = client.get("/it/").content.decode()
    assert "Never fits" in page and NEVER_FITS["message"].replace("'", "&#x27;") in page
    rows = client.get("/it/?export=csv&table=neverfits").content.decode().splitlines()
    assert rows[0] == "Task,Group,Compute resource,GPUs,Cause,Why,Submitted"
    assert [row.split(",")[:5] for row in rows[1:]] == [
        [str(stuck.pk), "Pretraining", "pretraining/h100-8", "8.000", "larger than every pool"]
    ]


def test_a_task_no_longer_waiting_leaves_the_never_fits_list(login):
    task = submit("dev-pretraining", "pretraining/h100-8")
    Task.objects.filter(pk=task.pk).update(verdict=NEVER_FITS, state=Task.State.CANCELED)
    rows = login("it").get("/it/?export=csv&table=neverfits").content.decode().splitlines()
    assert rows[1:] == []


def test_only_it_sees_the_never_fits_list(login):
    for username in ("cio", "finance", "lead-pretraining", "dev-pretraining"):
        assert login(username).get("/it/?export=csv&table=neverfits").status_code == 403
