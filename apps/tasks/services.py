"""Writes for tasks: submission from every channel goes through ``submit``."""

from decimal import Decimal

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Project, User
from apps.core.gpus import gpu_size_error
from apps.ledger import services as ledger
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


# The task lifecycle. Every state change of a task after submission goes through these functions;
# they write the task, its events and its usage interval together, in the caller's transaction.
#
#   queued --place--> placed --claim--> running --finish--> succeeded | failed
#   placed | running --request_stop--> stopping --stopped--> queued (requeued) | canceled
#   a stop of a task no worker has claimed takes effect at once.

LIFECYCLE_FIELDS = [
    "state",
    "pool",
    "worker",
    "placed_at",
    "claimed_at",
    "started_at",
    "ended_at",
    "stop_reason",
    "verdict",
    "preemption_count",
    "last_preemption_reason",
    "exit_code",
]


def _events(tasks, kind: str, at, *, reason: str | None = "", actor=None, detail=None):
    """One event per task; ``reason=None`` takes each task's own stop reason."""
    TaskEvent.objects.bulk_create(
        TaskEvent(
            task_id=task.pk,
            at=at,
            kind=kind,
            pool_id=task.pool_id,
            actor=actor,
            detail=detail or {},
            reason=task.stop_reason if reason is None else reason,
        )
        for task in tasks
    )


def place_many(placements, at) -> None:
    """Place waiting tasks on pools: ``placements`` is a list of (task, pool). The meter starts now."""
    tasks = []
    for task, pool in placements:
        if task.state != Task.State.QUEUED:
            raise ValueError(f"task {task.pk} is {task.state}, not waiting")
        task.state, task.pool, task.placed_at, task.verdict = Task.State.PLACED, pool, at, {}
        task.stop_reason, task.worker, task.claimed_at, task.started_at = "", None, None, None
        tasks.append(task)
    if not tasks:
        return
    Task.objects.bulk_update(tasks, LIFECYCLE_FIELDS, batch_size=1000)
    _events(tasks, TaskEvent.Kind.PLACED, at)
    ledger.open_intervals(tasks, at)


def request_stop_many(tasks, reason: str, at, *, actor=None) -> None:
    """Ask for the work of placed or running tasks to stop (a preemption or a cancel).

    A task that no worker has claimed holds no GPUs yet, so its stop takes effect at once;
    the others wait in ``stopping`` until their worker reports that the work has stopped.
    """
    if not tasks:
        return
    kind = TaskEvent.Kind.CANCEL_REQUESTED if reason == Task.StopReason.CANCELED else TaskEvent.Kind.PREEMPTED
    for task in tasks:
        if task.state not in (Task.State.PLACED, Task.State.RUNNING):
            raise ValueError(f"task {task.pk} is {task.state}, not placed or running")
        if kind == TaskEvent.Kind.PREEMPTED:
            task.preemption_count += 1
            task.last_preemption_reason = reason
        task.stop_reason = reason
        task.state = Task.State.STOPPING
    Task.objects.bulk_update(tasks, LIFECYCLE_FIELDS, batch_size=1000)
    _events(tasks, kind, at, reason=reason, actor=actor)
    stopped_many([t for t in tasks if t.worker_id is None], at)


def stopped_many(tasks, at, *, ended_at=None) -> None:
    """The work of stopping tasks has really stopped: close their intervals (at ``ended_at`` if
    given, else ``at``) and requeue them in their old place, or mark them canceled."""
    if not tasks:
        return
    ledger.close_intervals([t.pk for t in tasks], ended_at or at)
    canceled = [t for t in tasks if t.stop_reason == Task.StopReason.CANCELED]
    requeued = [t for t in tasks if t.stop_reason != Task.StopReason.CANCELED]
    for task in canceled:
        task.state, task.ended_at = Task.State.CANCELED, at
    _events(canceled, TaskEvent.Kind.CANCELED, at)
    _events(requeued, TaskEvent.Kind.REQUEUED, at, reason=None)
    for task in requeued:
        task.state, task.pool, task.worker, task.stop_reason = Task.State.QUEUED, None, None, ""
        task.placed_at = task.claimed_at = task.started_at = None
    Task.objects.bulk_update(tasks, LIFECYCLE_FIELDS, batch_size=1000)


def requeue_lost(tasks, reason: str, at, *, ended_at) -> None:
    """Work that can no longer be reached (its worker was lost, or it was never claimed) goes back
    to the front of its queue; it is charged only until ``ended_at``."""
    for task in tasks:
        if task.state not in Task.ACTIVE_STATES:
            raise ValueError(f"task {task.pk} is {task.state}, not active")
        if task.stop_reason != Task.StopReason.CANCELED:
            task.preemption_count += 1
            task.last_preemption_reason = reason
            task.stop_reason = reason
        task.state = Task.State.STOPPING
    if tasks:
        _events(tasks, TaskEvent.Kind.PREEMPTED, at, reason=reason)
    stopped_many(tasks, at, ended_at=ended_at)


def finish(task: Task, *, exit_code: int, at) -> Task:
    """The work ended on its own: succeeded with exit code 0, failed otherwise."""
    if task.state in Task.FINAL_STATES:
        return task
    if task.state == Task.State.STOPPING:
        raise ValueError(f"task {task.pk} is stopping; report it stopped instead")
    ledger.close_intervals([task.pk], at)
    task.state = Task.State.SUCCEEDED if exit_code == 0 else Task.State.FAILED
    task.exit_code, task.ended_at = exit_code, at
    task.save(update_fields=LIFECYCLE_FIELDS)
    kind = TaskEvent.Kind.SUCCEEDED if exit_code == 0 else TaskEvent.Kind.FAILED
    _events([task], kind, at, detail={"exit_code": exit_code})
    return task


@transaction.atomic
def cancel(task: Task, *, actor=None, at=None) -> Task:
    """Cancel a task: at once while it waits, after its work stops when it is placed or running."""
    at = at or timezone.now()
    task = Task.objects.select_for_update().get(pk=task.pk)
    if task.state in Task.FINAL_STATES or task.stop_reason == Task.StopReason.CANCELED:
        return task
    if task.state == Task.State.QUEUED:
        task.state, task.ended_at, task.verdict = Task.State.CANCELED, at, {}
        task.save(update_fields=LIFECYCLE_FIELDS)
        _events([task], TaskEvent.Kind.CANCELED, at, actor=actor)
    elif task.state == Task.State.STOPPING:
        task.stop_reason = Task.StopReason.CANCELED
        task.save(update_fields=["stop_reason"])
        _events([task], TaskEvent.Kind.CANCEL_REQUESTED, at, actor=actor)
    else:
        request_stop_many([task], Task.StopReason.CANCELED, at, actor=actor)
    return task
