"""Writes for tasks: submission from every channel goes through ``submit``."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Project, User
from apps.core.gpus import gpu_size_error
from apps.policies.models import ComputeResource
from apps.policies.rules import fmt
from apps.tasks.models import Channel, Task, TaskEvent


def task_size(resource: ComputeResource, gpus) -> Decimal:
    """The task's size: the profile's, or the task's own when the profile takes it from the task."""
    profile = resource.profile
    if gpus is None or gpus == "":
        return profile.gpus
    if not profile.size_from_task:
        if Decimal(gpus) != profile.gpus:
            raise ValidationError(
                {"gpus": f"Profile {profile} has a fixed size of {fmt(profile.gpus)} GPUs; leave GPUs empty."}
            )
        return profile.gpus
    error = gpu_size_error(gpus)
    if error:
        raise ValidationError({"gpus": f"GPUs: {error}"})
    size = Decimal(gpus)
    if size <= 0 and profile.gpus > 0:
        raise ValidationError({"gpus": "GPUs must be more than 0 on a GPU profile."})
    if size > resource.policy.limit:
        raise ValidationError(
            {
                "gpus": f"GPUs ({fmt(size)}) exceed the limit of {resource.policy} "
                f"({fmt(resource.policy.limit)}), so the task could never run."
            }
        )
    return size


@transaction.atomic
def submit(
    *,
    user: User,
    compute_resource: ComputeResource,
    command: str,
    gpus=None,
    name: str = "",
    project: Project | None = None,
    checkpoint: bool = False,
    spec: dict | None = None,
    channel: str = Channel.API,
) -> Task:
    if not compute_resource.enabled:
        raise ValidationError(
            {"compute_resource": f"Compute resource {compute_resource} accepts no new tasks."}
        )
    if not command or not command.strip():
        raise ValidationError({"command": "Command is required."})
    if project is not None and project.group_id != compute_resource.policy.group_id:
        raise ValidationError(
            {"project": f"Project {project} does not belong to group {compute_resource.policy.group}."}
        )
    size = task_size(compute_resource, gpus)
    task = Task.objects.create(
        user=user,
        compute_resource=compute_resource,
        command=command,
        gpus=size,
        name=name,
        project=project,
        checkpoint=checkpoint,
        spec=spec or {},
        channel=channel,
    )
    task.queue_seq = task.pk
    task.save(update_fields=["queue_seq"])
    TaskEvent.objects.create(
        task=task,
        at=timezone.now(),
        kind=TaskEvent.Kind.SUBMITTED,
        actor=user,
        detail={"channel": channel, "gpus": str(size)},
    )
    return task
