"""Rule 5 (arrays) on the portal: a task's page shows its array, its index, the cap and how many of
the array's tasks are in each state."""

import pytest

from apps.accounts.models import User
from apps.policies.models import ComputeResource
from apps.tasks import services
from apps.tasks.models import Task

pytestmark = pytest.mark.django_db


def test_arrays_the_task_page_shows_the_array_its_index_and_its_states(login):
    tasks = services.submit_array(
        user=User.objects.get(username="dev-pretraining"),
        compute_resource=ComputeResource.objects.get(name="pretraining/gpu-flex"),
        command="shard",
        gpus="1",
        size=3,
        max_running=2,
    )
    Task.objects.filter(pk=tasks[0].pk).update(state=Task.State.SUCCEEDED)
    page = login("dev-pretraining").get(f"/work/tasks/{tasks[1].pk}/").content.decode()
    shown = f"array {tasks[1].array_id}: index 1 of 3 (KLIQUE_ARRAY_INDEX), at most 2 at once"
    assert f'<dd id="task-array">{shown}; 2 waiting, 1 succeeded</dd>' in page
