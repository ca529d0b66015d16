"""Submitting a task: its size comes from the profile or the task, and bad sizes are refused."""

from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from apps.tasks import services
from apps.tasks.models import Task, TaskEvent
from tests.factories import (
    ComputeResourceFactory,
    PolicyFactory,
    PoolFactory,
    ProfileFactory,
    ProjectFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db


def submit(resource, **kwargs):
    if not resource.profile.pools.exists():
        resource.profile.pools.add(PoolFactory(capacity=64))
    return services.submit(user=UserFactory(), compute_resource=resource, command="train.py", **kwargs)


def test_a_task_takes_the_profiles_size_and_gets_a_queue_seq():
    resource = ComputeResourceFactory(profile=ProfileFactory(gpus=Decimal("0.25")))
    task = submit(resource)
    assert task.gpus == Decimal("0.25") and task.state == Task.State.QUEUED
    assert task.queue_seq == task.pk
    assert task.events.get().kind == TaskEvent.Kind.SUBMITTED


def test_size_from_task_uses_the_tasks_own_request_or_the_default():
    resource = ComputeResourceFactory(profile=ProfileFactory(gpus=1, size_from_task=True))
    assert submit(resource, gpus="4").gpus == 4
    assert submit(resource).gpus == 1


@pytest.mark.parametrize(
    ("gpus", "message"),
    [("-1", "cannot be negative"), ("2.5", "whole number"), ("0", "more than 0"), ("9", "exceed the limit")],
)
def test_bad_task_sizes_are_refused_naming_the_field(gpus, message):
    resource = ComputeResourceFactory(
        policy=PolicyFactory(limit=8), profile=ProfileFactory(gpus=1, size_from_task=True)
    )
    with pytest.raises(ValidationError) as caught:
        submit(resource, gpus=gpus)
    assert any(message in m for m in caught.value.message_dict["gpus"])


def test_a_fixed_size_profile_refuses_another_size():
    resource = ComputeResourceFactory(profile=ProfileFactory(gpus=1))
    with pytest.raises(ValidationError) as caught:
        submit(resource, gpus="0.5")
    assert "fixed size" in caught.value.message_dict["gpus"][0]


def test_a_project_must_belong_to_the_resources_group():
    resource = ComputeResourceFactory()
    with pytest.raises(ValidationError) as caught:
        submit(resource, project=ProjectFactory())
    assert "project" in caught.value.message_dict
