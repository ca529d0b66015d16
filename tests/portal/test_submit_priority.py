"""The portal's submit form takes a priority: a whole number or a class's name, empty for the
compute resource's default; a priority above the maximum is refused on the field."""

import pytest

from apps.policies.models import ComputeResource, PriorityClass
from apps.tasks.models import Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def flex():
    for name, value in (("low", 0), ("normal", 100), ("high", 200)):
        PriorityClass.objects.update_or_create(name=name, defaults={"value": value})
    resource = ComputeResource.objects.get(name="pretraining/gpu-flex")
    resource.default_priority, resource.max_priority = 100, 100
    resource.save()
    return resource


def post(login, resource, priority):
    form = {"compute_resource": resource.pk, "command": "python train.py", "gpus": "1", "priority": priority}
    return login("dev-pretraining").post("/work/", form)


@pytest.mark.parametrize(("asked", "got"), [("", 100), ("Normal", 100), ("-5", -5)])
def test_the_submit_form_sets_the_tasks_priority_or_the_default(login, flex, asked, got):
    response = post(login, flex, asked)
    assert response.status_code == 302
    assert Task.objects.get().priority == got


def test_the_form_lists_the_classes_and_refuses_a_priority_above_the_maximum_on_the_field(login, flex):
    page = login("dev-pretraining").get("/work/").content.decode()
    assert "Classes: low (0), normal (100), high (200)." in page
    response = post(login, flex, "high")
    assert response.status_code == 400
    page = response.content.decode()
    assert "Priority 200 is above the maximum: at most 100 (normal) on pretraining/gpu-flex." in page
    assert not Task.objects.exists()
