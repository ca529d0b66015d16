"""Writes for task submission: every channel goes through ``submit`` (one task) or ``submit_many``
(a bulk request, all or none); both check each task with ``check_submission``."""

from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from apps.accounts.models import Agent, Project, User
from apps.core.gpus import gpu_size_error
from apps.policies.models import ComputeResource
from apps.policies.rules import fmt
from apps.policies.selectors import largest_pool
from apps.tasks import wake
from apps.tasks.limits import nodes_error, size_errors
from apps.tasks.models import Channel, Task, TaskArray, TaskEvent, counted_gpus
from apps.tasks.services import dependencies
from apps.tasks.services.agents import refusal as agent_refusal
from apps.tasks.services.priority import resolve_priority
from apps.tasks.services.time_limits import resolve_time_limit


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


def check_nodes(resource: ComputeResource, size: Decimal, nodes) -> int:
    """The task's nodes, checked against its size per node, its policy's limit (on GPUs x nodes)
    and its profile's pools (several nodes only where every pool of the profile runs multi-node
    work: the engine places on any of them)."""
    nodes = 1 if nodes is None or nodes == "" else nodes
    error = nodes_error(nodes)
    if error:
        raise ValidationError({"nodes": error})
    if nodes == 1:
        return nodes
    if size <= 0:
        raise ValidationError({"nodes": "A task on several nodes needs GPUs on each (GPUs more than 0)."})
    counted = counted_gpus(size, nodes)
    if counted > resource.policy.limit:
        message = (
            f"GPUs x nodes ({fmt(size)} x {nodes} = {fmt(counted)}) exceed the limit of {resource.policy} "
            f"({fmt(resource.policy.limit)}), so the task could never run."
        )
        raise ValidationError({"gpus": message, "nodes": message})
    single = resource.profile.pools.filter(multi_node=False).order_by("name").values_list("name", flat=True)
    if single:
        raise ValidationError(
            {
                "nodes": f"Profile {resource.profile} has pools that run no multi-node work "
                f"({', '.join(single)}), so a task there runs on one node."
            }
        )
    return nodes


def check_fits(resource: ComputeResource, size: Decimal, nodes: int, largest: dict | None = None) -> None:
    """Refuse a task that could never run: its GPUs x nodes larger than the largest pool its
    profile lists (declared capacity, enabled or not: a disabled pool may come back), or a profile
    listing no pool. The field is ``gpus`` when its GPUs alone are too large, else ``nodes``.
    ``largest`` remembers each profile's largest pool across the items of one bulk request."""
    profile = resource.profile
    if largest is not None and profile.pk in largest:
        found = largest[profile.pk]
    else:
        found = largest_pool(profile.pk)
        if largest is not None:
            largest[profile.pk] = found
    if found is None:
        message = f"Profile {profile} lists no pool, so compute resource {resource} can run nothing."
        raise ValidationError({"compute_resource": message})
    name, capacity = found
    counted = counted_gpus(size, nodes)
    if counted <= capacity:
        return
    shown = f"{_gpus(counted)} never {'fits' if counted == 1 else 'fit'}"
    if nodes > 1:
        shown = f"{_gpus(size)} x {nodes} nodes = {shown}"
    message = f"{shown}: the largest pool of profile {profile} is {name} ({_gpus(capacity)})."
    raise ValidationError({"gpus" if size > capacity else "nodes": message})


def _gpus(amount) -> str:
    return f"{fmt(amount)} GPU{'' if amount == 1 else 's'}"


# Rows per INSERT when tasks and their events are written in bulk.
BULK_BATCH = 1000


def check_submission(
    *,
    user: User,
    compute_resource: ComputeResource,
    command: str,
    gpus=None,
    nodes: int = 1,
    name: str = "",
    project: Project | None = None,
    checkpoint: bool = False,
    spec: dict | None = None,
    channel: str = Channel.API,
    kind: str = Task.Kind.BATCH,
    largest: dict | None = None,
    agent: Agent | None = None,
    priority=None,
    time_limit_s=None,
    after_ok=None,
    after_any=None,
    index: int | None = None,
) -> Task:
    """The rules every submission passes, whatever its channel: the unsaved task, or a
    ValidationError naming the field (``largest``: see ``check_fits``; ``priority``: what the
    submitter asks for, see ``resolve_priority``; ``time_limit_s``: ``resolve_time_limit``;
    ``after_ok`` and ``after_any``: ``dependencies.check``, ``index`` the item's place in a bulk
    request). The task's checked dependencies ride on it as ``task.needs`` for ``_create``."""
    if not compute_resource.enabled:
        raise ValidationError(
            {"compute_resource": f"Compute resource {compute_resource} accepts no new tasks."}
        )
    if not command or not command.strip():
        raise ValidationError({"command": "Command is required."})
    too_large = size_errors(command, spec)
    if too_large:
        raise ValidationError(too_large)
    if project is not None and project.group_id != compute_resource.policy.group_id:
        raise ValidationError(
            {"project": f"Project {project} does not belong to group {compute_resource.policy.group}."}
        )
    priority = resolve_priority(compute_resource, priority)
    time_limit_s = resolve_time_limit(compute_resource, time_limit_s, session=kind == Task.Kind.SESSION)
    size = task_size(compute_resource, gpus)
    nodes = check_nodes(compute_resource, size, nodes)
    check_fits(compute_resource, size, nodes, largest)
    needs = dependencies.check(user, after_ok, after_any, index=index)
    if needs and kind == Task.Kind.SESSION:
        raise ValidationError({"after_ok": "A session starts when asked; it runs after no task."})
    task = Task(
        user=user,
        compute_resource=compute_resource,
        command=command,
        gpus=size,
        nodes=nodes,
        name=name,
        project=project,
        checkpoint=checkpoint,
        spec=spec or {},
        channel=channel,
        kind=kind,
        agent=agent,
        priority=priority,
        time_limit_s=time_limit_s,
        waits_on=needs.unended(),
    )
    task.needs = needs
    return task


def _create(tasks: list[Task]) -> list[Task]:
    """Write checked tasks in their order: their rows (a task's queue seq is its id), their
    dependency links, their ``submitted`` events, and one request for an engine pass once the
    transaction commits."""
    at = timezone.now()
    Task.objects.bulk_create(tasks, batch_size=BULK_BATCH)
    Task.objects.filter(pk__in=[task.pk for task in tasks]).update(queue_seq=F("pk"))
    for task in tasks:
        task.queue_seq = task.pk
    after = dependencies.link(tasks, [getattr(task, "needs", None) or dependencies.Needs() for task in tasks])
    TaskEvent.objects.bulk_create(
        (
            TaskEvent(
                task=task,
                at=at,
                kind=TaskEvent.Kind.SUBMITTED,
                actor=task.user,
                detail={
                    "channel": task.channel,
                    "gpus": str(task.gpus),
                    **({"nodes": task.nodes} if task.nodes > 1 else {}),
                    **({"kind": task.kind} if task.kind != Task.Kind.BATCH else {}),
                    **({"agent": task.agent.label} if task.agent_id else {}),
                    **({"priority": task.priority} if task.priority else {}),
                    **({"time_limit_s": task.time_limit_s} if task.time_limit_s else {}),
                    **({"array": task.array_id, "array_index": task.array_index} if task.array_id else {}),
                    **({"after": after[task.pk]} if after.get(task.pk) else {}),
                },
            )
            for task in tasks
        ),
        batch_size=BULK_BATCH,
    )
    wake.request_pass()
    return tasks


@transaction.atomic
def submit(*, user: User, compute_resource: ComputeResource, command: str, **fields) -> Task:
    """Submit a task (the fields of ``check_submission``). A session (``kind="session"``) is
    started through ``apps.sessions.services``, which calls this and adds its session row in the
    same transaction. An agent's task (``agent``) is refused when the agent is stopped or over a
    daily or monthly cap (``apps.tasks.services.agents.refusal``)."""
    if fields.get("agent") is not None:
        agent_refusal(fields["agent"])
    return _create(
        [check_submission(user=user, compute_resource=compute_resource, command=command, **fields)]
    )[0]


class SubmissionsRefused(Exception):
    """Items of a bulk submission were refused: ``errors`` maps each refused item's index to its
    field errors ({field: [reason, ...]})."""

    def __init__(self, errors: dict[int, dict[str, list[str]]]):
        super().__init__(f"{len(errors)} of the tasks were refused")
        self.errors = errors


BULK_MIN = 1  # the fewest tasks of a bulk submission (the most: settings.TASKS_BULK_MAX)


def bulk_count_error(count: int) -> str | None:
    """Why a bulk submission of ``count`` tasks is refused as a whole, or None."""
    if count < BULK_MIN:
        return "Give at least one task."
    limit = settings.TASKS_BULK_MAX
    if count > limit:
        return (
            f"At most {limit} tasks per request (TASKS_BULK_MAX); this one has {count}. Send them in batches."
        )
    return None


@transaction.atomic
def submit_many(
    *, user: User, items: list[dict], channel: str = Channel.API, agent: Agent | None = None
) -> list[Task]:
    """Submit many tasks at once, all or none: each item (the fields of ``check_submission``) is
    checked by the same rules as ``submit``; when any is refused, ``SubmissionsRefused`` names
    every refused item and nothing is written. The tasks are created in the items' order (ids and
    queue seqs ascending) with one request for an engine pass."""
    error = bulk_count_error(len(items))
    if error:
        raise ValidationError({"tasks": error})
    if agent is not None:
        agent_refusal(agent)
    tasks, errors, largest = [], {}, {}
    for index, item in enumerate(items):
        try:
            tasks.append(
                check_submission(
                    user=user, channel=channel, largest=largest, agent=agent, index=index, **item
                )
            )
        except ValidationError as refused:
            errors[index] = refused.message_dict
    if errors:
        raise SubmissionsRefused(errors)
    return _create(tasks)


ARRAY_MIN = 1  # the fewest tasks of an array (the most: settings.TASKS_BULK_MAX)


@transaction.atomic
def submit_array(
    *, user: User, size, max_running=None, agent: Agent | None = None, channel: str = Channel.API, **fields
) -> list[Task]:
    """Submit ``size`` tasks of one spec (the fields of ``check_submission``), each with its index
    (``KLIQUE_ARRAY_INDEX`` on its worker), at most ``max_running`` of them placed at once."""
    limit = settings.TASKS_BULK_MAX
    if isinstance(size, bool) or not isinstance(size, int) or not ARRAY_MIN <= size <= limit:
        raise ValidationError({"array": f"An array has {ARRAY_MIN} to {limit} tasks (TASKS_BULK_MAX)."})
    if max_running is not None and (
        isinstance(max_running, bool) or not isinstance(max_running, int) or max_running < 1
    ):
        raise ValidationError({"max_running": "Give a whole number of at least 1, or leave it out."})
    if fields.get("kind", Task.Kind.BATCH) == Task.Kind.SESSION:
        raise ValidationError({"array": "Sessions are started one at a time."})
    if agent is not None:
        agent_refusal(agent)
    first = check_submission(user=user, channel=channel, agent=agent, **fields)
    array = TaskArray.objects.create(user=user, size=size, max_running=max_running)
    copied = [f.attname for f in Task._meta.concrete_fields if not f.primary_key]
    tasks = []
    for index in range(size):
        task = Task(**{name: getattr(first, name) for name in copied})
        task.array, task.array_index, task.needs = array, index, first.needs
        tasks.append(task)
    return _create(tasks)
