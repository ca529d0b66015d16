"""Rule 1 (time limits) on the portal: the submit form's time limit (a duration, with each compute
resource's default and maximum in its hint; above the maximum refused on the field), the task
page's limit, time left and running time so far, and a timed-out task shown as "Timed out"."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.policies.models import ComputeResource
from apps.tasks.models import Task
from tests.portal.conftest import submit

pytestmark = pytest.mark.django_db


@pytest.fixture
def flex():
    resource = ComputeResource.objects.get(name="pretraining/gpu-flex")
    resource.default_time_limit_s, resource.max_time_limit_s = 3600, 4 * 3600
    resource.save()
    return resource


def post(login, resource, time_limit):
    form = {"compute_resource": resource.pk, "command": "train", "gpus": "1", "time_limit_s": time_limit}
    return login("dev-pretraining").post("/work/", form)


@pytest.mark.parametrize(("typed", "got"), [("", 3600), ("2h30m", 9000), ("90m", 5400), ("600", 600)])
def test_time_limits_the_submit_form_takes_a_duration_or_the_default(login, flex, typed, got):
    assert post(login, flex, typed).status_code == 302
    assert Task.objects.get().time_limit_s == got


def test_time_limits_the_form_hints_the_default_and_maximum_and_refuses_above_it(login, flex):
    page = login("dev-pretraining").get("/work/").content.decode()
    assert "pretraining/gpu-flex: 60 min, at most 4 h" in page
    response = post(login, flex, "5h")
    assert response.status_code == 400
    page = response.content.decode()
    assert "Time limit: Time limit 5 h (18000 s) is above the maximum on pretraining/gpu-flex" in page
    bad = post(login, flex, "soon").content.decode()
    assert "Time limit: &#x27;soon&#x27; is not a duration" in bad
    assert not Task.objects.exists()


def test_time_limits_the_task_page_shows_the_limit_time_left_and_ran_so_far(login, flex):
    task = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1", time_limit_s=3 * 3600)
    Task.objects.filter(pk=task.pk).update(
        state=Task.State.RUNNING, ran_s=1800, started_at=timezone.now() - timedelta(minutes=30)
    )
    page = login("dev-pretraining").get(f"/work/tasks/{task.pk}/").content.decode()
    assert '<dd id="task-time-limit">3 h, 2 h left; ran 60 min</dd>' in page


def test_time_limits_a_timed_out_task_reads_timed_out_with_the_reason(login, flex):
    task = submit("dev-pretraining", "pretraining/gpu-flex", gpus="1")
    Task.objects.filter(pk=task.pk).update(
        state=Task.State.TIMED_OUT,
        stop_reason=Task.StopReason.TIME_LIMIT,
        ran_s=3600,
        ended_at=timezone.now(),
    )
    client = login("dev-pretraining")
    page = client.get(f"/work/tasks/{task.pk}/").content.decode()
    assert '<dd id="task-state">Timed out</dd>' in page
    assert "Stopped at its time limit" in page and "60 min; ran 60 min" in page
    assert "Cancel the task" not in page
    work = client.get("/work/").content.decode()
    assert "timed out" in work and "Stopped at its time limit" in work
    assert "timed_out" not in work.replace('value="timed_out"', "")
