"""Writes for tasks: submission from every channel goes through ``submit`` (one task) or
``submit_many`` (a bulk request, all or none); both check each task with ``check_submission``."""

import json
from collections import defaultdict
from datetime import datetime
from decimal import Decimal

from croniter import CroniterError, croniter
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from apps.accounts.models import Notification, Project, User
from apps.accounts.selectors import member_group_ids
from apps.core.gpus import gpu_size_error
from apps.core.sql import array_literal
from apps.engine import wake
from apps.ledger import services as ledger
from apps.policies.models import ComputeResource
from apps.policies.rules import fmt
from apps.policies.selectors import largest_pool
from apps.tasks.limits import nodes_error, size_errors
from apps.tasks.models import Channel, Schedule, ScheduleRun, Task, TaskEvent, counted_gpus


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
) -> Task:
    """The rules every submission passes, whatever its channel: the unsaved task, or a
    ValidationError naming the field (``largest``: see ``check_fits``)."""
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
    size = task_size(compute_resource, gpus)
    nodes = check_nodes(compute_resource, size, nodes)
    check_fits(compute_resource, size, nodes, largest)
    return Task(
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
    )


def _create(tasks: list[Task]) -> list[Task]:
    """Write checked tasks in their order: their rows (a task's queue seq is its id), their
    ``submitted`` events, and one request for an engine pass once the transaction commits."""
    at = timezone.now()
    Task.objects.bulk_create(tasks, batch_size=BULK_BATCH)
    Task.objects.filter(pk__in=[task.pk for task in tasks]).update(queue_seq=F("pk"))
    for task in tasks:
        task.queue_seq = task.pk
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
    same transaction."""
    return _create(
        [check_submission(user=user, compute_resource=compute_resource, command=command, **fields)]
    )[0]


class SubmissionsRefused(Exception):
    """Items of a bulk submission were refused: ``errors`` maps each refused item's index to its
    field errors ({field: [reason, ...]})."""

    def __init__(self, errors: dict[int, dict[str, list[str]]]):
        super().__init__(f"{len(errors)} of the tasks were refused")
        self.errors = errors


def bulk_count_error(count: int) -> str | None:
    """Why a bulk submission of ``count`` tasks is refused as a whole, or None."""
    if count < 1:
        return "Give at least one task."
    limit = settings.TASKS_BULK_MAX
    if count > limit:
        return (
            f"At most {limit} tasks per request (TASKS_BULK_MAX); this one has {count}. Send them in batches."
        )
    return None


@transaction.atomic
def submit_many(*, user: User, items: list[dict], channel: str = Channel.API) -> list[Task]:
    """Submit many tasks at once, all or none: each item (the fields of ``check_submission``) is
    checked by the same rules as ``submit``; when any is refused, ``SubmissionsRefused`` names
    every refused item and nothing is written. The tasks are created in the items' order (ids and
    queue seqs ascending) with one request for an engine pass."""
    error = bulk_count_error(len(items))
    if error:
        raise ValidationError({"tasks": error})
    tasks, errors, largest = [], {}, {}
    for index, item in enumerate(items):
        try:
            tasks.append(check_submission(user=user, channel=channel, largest=largest, **item))
        except ValidationError as refused:
            errors[index] = refused.message_dict
    if errors:
        raise SubmissionsRefused(errors)
    return _create(tasks)


# The task lifecycle. Every state change of a task after submission goes through these functions;
# they write the task, its events and its usage interval together, in the caller's transaction.
#
#   queued --place--> placed --claim--> running --finish--> succeeded | failed
#   placed | running --request_stop--> stopping --stopped--> queued (requeued) | canceled
#   a stop of a task no worker has claimed takes effect at once.
#   A session is never requeued: whatever stopped it (idle, reclaim, budget, a lost worker), it
#   ends ``canceled`` with its stop reason kept, and its owner may start another.

NOT_PREEMPTIONS = (Task.StopReason.CANCELED, Task.StopReason.IDLE)

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


def _lifecycle_values(task: Task) -> dict:
    """The task's ``LIFECYCLE_FIELDS`` as ``save(update_fields=LIFECYCLE_FIELDS)`` writes them."""
    return {
        field.attname: getattr(task, field.attname)
        for field in (Task._meta.get_field(name) for name in LIFECYCLE_FIELDS)
    }


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def _events(tasks, kind: str, at, *, reason: str | None = "", actor=None, detail=None):
    """One event per task, in the tasks' order; ``reason=None`` takes each task's own stop reason.
    On PostgreSQL one ``INSERT ... SELECT FROM unnest(...)`` whatever the number of tasks."""
    if not tasks:
        return
    if not _postgres():
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
        return
    ids = array_literal(task.pk for task in tasks)
    pools = array_literal(task.pool_id for task in tasks)
    actor_id, document = (actor.pk if actor is not None else None), json.dumps(detail or {})
    if reason is None:
        reasons = "u.reason"
        params = [at, kind, actor_id, document, ids, pools, [task.stop_reason for task in tasks]]
        arrays = "%s::bigint[], %s::bigint[], %s::text[]) WITH ORDINALITY AS u(task, pool, reason, n)"
    else:
        reasons, params = "%s", [at, kind, reason, actor_id, document, ids, pools]
        arrays = "%s::bigint[], %s::bigint[]) WITH ORDINALITY AS u(task, pool, n)"
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tasks_taskevent (task_id, at, kind, pool_id, reason, actor_id, detail) "
            f"SELECT u.task, %s, %s, u.pool, {reasons}, %s, %s::jsonb FROM unnest({arrays} ORDER BY u.n",
            params,
        )


def _update(tasks, *, count_preemption: bool = False, pools=None, **fields) -> None:
    """Write the same field values to many tasks in one UPDATE (the engine moves thousands):
    ``count_preemption`` adds one to their preemption count, ``pools`` gives each its own pool.
    On PostgreSQL the ids (and pools) go as arrays, whatever their number."""
    if not tasks:
        return
    if not _postgres():
        if count_preemption:
            fields["preemption_count"] = F("preemption_count") + 1
        if pools is not None:
            by_pool = defaultdict(list)
            for task, pool in zip(tasks, pools, strict=True):
                by_pool[pool].append(task.pk)
            fields["pool_id"] = Case(*(When(pk__in=ids, then=Value(p)) for p, ids in by_pool.items()))
        Task.objects.filter(pk__in=[t.pk for t in tasks]).update(**fields)
        return
    sets, params = [], []
    for name, value in fields.items():
        field = Task._meta.get_field(name)
        sets.append(f"{connection.ops.quote_name(field.column)} = %s")
        params.append(field.get_db_prep_save(value, connection))
    if count_preemption:
        sets.append("preemption_count = preemption_count + 1")
    ids = array_literal(task.pk for task in tasks)
    if pools is None:
        where, params = "WHERE id = ANY(%s::bigint[])", [*params, ids]
    else:
        sets.append("pool_id = u.pool")
        where = "FROM unnest(%s::bigint[], %s::bigint[]) AS u(id, pool) WHERE tasks_task.id = u.id"
        params = [*params, ids, array_literal(pools)]
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE tasks_task SET {', '.join(sets)} {where}", params)


@transaction.atomic
def place_many(placements, at) -> None:
    """Place waiting tasks on pools: ``placements`` is a list of (task, pool). The meter starts now."""
    for task, pool in placements:
        if task.state != Task.State.QUEUED:
            raise ValueError(f"task {task.pk} is {task.state}, not waiting")
        task.state, task.pool, task.placed_at, task.verdict = Task.State.PLACED, pool, at, {}
        task.stop_reason, task.worker, task.claimed_at, task.started_at = "", None, None, None
    if not placements:
        return
    tasks = [task for task, _ in placements]
    _update(
        tasks,
        pools=[pool.pk for _, pool in placements],
        state=Task.State.PLACED,
        placed_at=at,
        verdict={},
        stop_reason="",
        worker=None,
        claimed_at=None,
        started_at=None,
    )
    _events(tasks, TaskEvent.Kind.PLACED, at)
    ledger.open_intervals(tasks, at)


@transaction.atomic
def request_stop_many(tasks, reason: str, at, *, actor=None, detail=None) -> None:
    """Ask for the work of placed or running tasks to stop (a preemption, a cancel, or a session's
    idle limit: ``detail`` names the limit on the event).

    A task that no worker has claimed holds no GPUs yet, so its stop takes effect at once;
    the others wait in ``stopping`` until their worker reports that the work has stopped.
    """
    if not tasks:
        return
    preempting = reason not in NOT_PREEMPTIONS
    for task in tasks:
        if task.state not in (Task.State.PLACED, Task.State.RUNNING):
            raise ValueError(f"task {task.pk} is {task.state}, not placed or running")
        if preempting:
            task.preemption_count += 1
            task.last_preemption_reason = reason
        task.stop_reason = reason
        task.state = Task.State.STOPPING
    counted = {"count_preemption": True, "last_preemption_reason": reason}
    _update(tasks, state=Task.State.STOPPING, stop_reason=reason, **(counted if preempting else {}))
    if preempting:
        kind = TaskEvent.Kind.PREEMPTED
    elif reason == Task.StopReason.IDLE:
        kind = TaskEvent.Kind.STOP_REQUESTED
    else:
        kind = TaskEvent.Kind.CANCEL_REQUESTED
    _events(tasks, kind, at, reason=reason, actor=actor, detail=detail)
    stopped_many([t for t in tasks if t.worker_id is None], at)


@transaction.atomic
def stopped_many(tasks, at, *, ended_at=None) -> None:
    """The work of stopping tasks has really stopped: close their intervals (at ``ended_at`` if
    given, else ``at``) and requeue them in their old place, or mark them canceled. A session is
    never requeued: it ends (``canceled``, its stop reason kept)."""
    if not tasks:
        return
    ledger.close_intervals([t.pk for t in tasks], ended_at or at)
    canceled = [t for t in tasks if t.stop_reason == Task.StopReason.CANCELED]
    ended = [t for t in tasks if t.kind == Task.Kind.SESSION and t not in canceled]
    requeued = [t for t in tasks if t not in canceled and t not in ended]
    for task in canceled + ended:
        task.state, task.ended_at = Task.State.CANCELED, at
    _events(canceled, TaskEvent.Kind.CANCELED, at)
    _events(ended, TaskEvent.Kind.ENDED, at, reason=None)
    _events(requeued, TaskEvent.Kind.REQUEUED, at, reason=None)
    for task in requeued:
        task.state, task.pool, task.worker, task.stop_reason = Task.State.QUEUED, None, None, ""
        task.placed_at = task.claimed_at = task.started_at = None
    _update(canceled + ended, state=Task.State.CANCELED, ended_at=at)
    _update(
        requeued,
        state=Task.State.QUEUED,
        pool=None,
        worker=None,
        stop_reason="",
        placed_at=None,
        claimed_at=None,
        started_at=None,
    )


@transaction.atomic
def requeue_lost(tasks, reason: str, at, *, ended_at) -> None:
    """Work that can no longer be reached (its worker was lost, or it was never claimed) goes back
    to the front of its queue; it is charged only until ``ended_at``. A task already being stopped
    keeps its stop: it was preempted (or canceled) once, for that reason."""
    for task in tasks:
        if task.state not in Task.ACTIVE_STATES:
            raise ValueError(f"task {task.pk} is {task.state}, not active")
    lost = [t for t in tasks if t.state != Task.State.STOPPING]
    for task in lost:
        task.preemption_count += 1
        task.last_preemption_reason = task.stop_reason = reason
        task.state = Task.State.STOPPING
    _update(lost, count_preemption=True, last_preemption_reason=reason)
    _events(lost, TaskEvent.Kind.PREEMPTED, at, reason=reason)
    stopped_many(tasks, at, ended_at=ended_at)


def finish(task: Task, *, exit_code: int, at) -> Task:
    """The work ended on its own: succeeded with exit code 0, failed otherwise. Work that ends on
    its own while a stop is pending (it finished before its worker got the stop) is done, not
    requeued: running it again would redo finished work.

    Its writes (interval, task, event) are one transaction: the caller's without a savepoint (a
    daemon's sync reports many ends, each savepoint two more round trips), else its own. The
    checks come first, so a refused call leaves the caller's transaction usable."""
    if task.state in Task.FINAL_STATES:
        return task
    if task.state not in Task.ACTIVE_STATES:
        raise ValueError(f"task {task.pk} is {task.state}: no work of it runs")
    with transaction.atomic(savepoint=False):
        ledger.close_intervals([task.pk], at)
        task.state = Task.State.SUCCEEDED if exit_code == 0 else Task.State.FAILED
        task.exit_code, task.ended_at, task.stop_reason = exit_code, at, ""
        _update([task], **_lifecycle_values(task))
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
    wake.request_pass()
    return task


@transaction.atomic
def start_failed(task: Task, *, error: str, at, attempts: int, worker: str = "") -> Task:
    """The task's worker could not start its work (the OS refused to run the command, sbatch
    refused the job). It goes back to the front of its queue (reason ``start_failed``) for another
    try, on any worker of its pools, until its work has failed to start ``attempts`` times: then it
    ends ``failed`` with the error as its ``failure``. A task being canceled ends canceled. A
    session is never requeued, so it ends ``failed`` at its first failure."""
    if task.state not in Task.ACTIVE_STATES:
        raise ValueError(f"task {task.pk} is {task.state}, not active")
    _events([task], TaskEvent.Kind.START_FAILED, at, detail={"error": error, "worker": worker})
    failures = task.events.filter(kind=TaskEvent.Kind.START_FAILED).count()
    if task.stop_reason == Task.StopReason.CANCELED and task.state == Task.State.STOPPING:
        stopped_many([task], at)
    elif failures < attempts and task.kind != Task.Kind.SESSION:
        requeue_lost([task], Task.StopReason.START_FAILED, at, ended_at=at)
    else:
        ledger.close_intervals([task.pk], at)
        task.state, task.ended_at, task.stop_reason, task.exit_code = Task.State.FAILED, at, "", None
        where = f" on worker {worker}" if worker else ""
        reason = error or "the worker gave no reason"
        task.failure = f"Could not start{where} ({failures} of {attempts} attempts): {reason}"
        task.save(update_fields=[*LIFECYCLE_FIELDS, "failure"])
        detail = {"error": error, "attempts": failures}
        _events([task], TaskEvent.Kind.FAILED, at, reason=Task.StopReason.START_FAILED, detail=detail)
    return task


def claim_many(worker, tasks, at, slots=None) -> None:
    """A worker daemon of the tasks' pool took them; they stay placed (and charged) until started.
    ``slots``: the GPU slots of the worker each task got (a claim by slots), kept for re-adoption."""
    slots = slots or [[] for _ in tasks]
    for task, chosen in zip(tasks, slots, strict=True):
        if task.state != Task.State.PLACED or task.worker_id is not None or task.pool_id != worker.pool_id:
            raise ValueError(f"task {task.pk} is not placed on {worker.pool} and unclaimed")
        task.worker, task.claimed_at, task.slots = worker, at, list(chosen)
    if not tasks:
        return
    if _postgres():
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE tasks_task SET worker_id = %s, claimed_at = %s, slots = u.slots::jsonb "
                "FROM unnest(%s::bigint[], %s::text[]) AS u(id, slots) WHERE tasks_task.id = u.id",
                [worker.pk, at, array_literal(t.pk for t in tasks), [json.dumps(t.slots) for t in tasks]],
            )
    else:
        Task.objects.bulk_update(tasks, ["worker", "claimed_at", "slots"])
    ledger.claim_intervals([task.pk for task in tasks], worker)
    _events(tasks, TaskEvent.Kind.CLAIMED, at, detail={"worker": worker.hostname, "worker_id": worker.pk})


def mark_started(task: Task, at, *, detail=None) -> Task:
    """The claimed task's work runs on its worker (a process started, or a Slurm job allocated)."""
    if task.state != Task.State.PLACED or task.worker_id is None:
        raise ValueError(f"task {task.pk} is {task.state}, not placed and claimed")
    task.state, task.started_at = Task.State.RUNNING, at
    _update([task], **_lifecycle_values(task))
    _events([task], TaskEvent.Kind.STARTED, at, detail=detail)
    return task


# Schedules: pipelines and unattended runs. Each due time of a schedule's cron expression (UTC)
# submits one task as the owner through ``submit``. The run row and the task are written in one
# transaction and a unique constraint on (schedule, due time) refuses a second one, so a due time
# submits exactly once however many beats run. A schedule that missed due times while no beat
# ran submits once, for the latest of them.

SCHEDULE_FIELDS = [
    "name",
    "cron",
    "compute_resource",
    "command",
    "gpus",
    "nodes",
    "project",
    "checkpoint",
    "spec",
]


def next_due(cron: str, after: datetime) -> datetime:
    """The first due time strictly after ``after``."""
    return croniter(cron, after).get_next(datetime)


def latest_due(cron: str, now: datetime) -> datetime:
    """The last due time at or before ``now``."""
    previous = croniter(cron, now).get_prev(datetime)
    following = next_due(cron, previous)
    return following if following <= now else previous


def cron_error(cron: str) -> str | None:
    if not cron or len(cron.split()) != 5 or not croniter.is_valid(cron):
        return "Enter a cron expression of five fields (minute hour day month weekday), e.g. '0 2 * * *'."
    try:
        next_due(cron, timezone.now())
    except CroniterError:
        return "This cron expression is never due."
    return None


def schedule_refusal(schedule: Schedule) -> str | None:
    """Why the owner may not submit to the schedule's compute resource any more, or None."""
    owner, resource = schedule.owner, schedule.compute_resource
    if not owner.is_active:
        return f"The owner {owner} is deactivated."
    if resource.policy.group_id not in member_group_ids(owner):
        return (
            f"The owner {owner} is no longer a member of {resource.policy.group}, so may not submit "
            f"to compute resource {resource}."
        )
    return None


def _check_schedule(schedule: Schedule) -> None:
    errors = {}
    if not schedule.name.strip():
        errors["name"] = "Give the schedule a name."
    if not schedule.command.strip():
        errors["command"] = "Command is required."
    errors.update(size_errors(schedule.command, schedule.spec))
    error = cron_error(schedule.cron)
    if error:
        errors["cron"] = error
    refusal = schedule_refusal(schedule)
    if refusal:
        errors["compute_resource"] = refusal
    else:
        try:
            size = task_size(schedule.compute_resource, schedule.gpus)
            nodes = check_nodes(schedule.compute_resource, size, schedule.nodes)
            check_fits(schedule.compute_resource, size, nodes)
        except ValidationError as size_error:
            errors.update(size_error.message_dict)
    group = schedule.compute_resource.policy.group
    if schedule.project is not None and schedule.project.group_id != group.pk:
        errors["project"] = f"Project {schedule.project} does not belong to group {group}."
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def create_schedule(*, owner: User, now: datetime | None = None, **fields) -> Schedule:
    schedule = Schedule(owner=owner, **{k: v for k, v in fields.items() if k in SCHEDULE_FIELDS})
    schedule.spec = schedule.spec or {}
    _check_schedule(schedule)
    schedule.next_run_at = next_due(schedule.cron, now or timezone.now())
    schedule.save()
    return schedule


@transaction.atomic
def update_schedule(schedule: Schedule, *, now: datetime | None = None, **fields) -> Schedule:
    """Change the template or the cron expression; ``active=True`` restarts a stopped schedule and
    ``active=False`` pauses it. The next due time is counted from now."""
    now = now or timezone.now()
    schedule = Schedule.objects.select_for_update().get(pk=schedule.pk)
    for name in SCHEDULE_FIELDS:
        if name in fields:
            setattr(schedule, name, fields[name])
    schedule.active = fields.get("active", schedule.active)
    if schedule.active:
        _check_schedule(schedule)
        schedule.stopped_reason, schedule.stopped_at = "", None
        schedule.next_run_at = next_due(schedule.cron, now)
    else:
        if cron_error(schedule.cron):
            raise ValidationError({"cron": cron_error(schedule.cron)})
        schedule.next_run_at = None
        schedule.stopped_at = schedule.stopped_at or now
    schedule.save()
    return schedule


def delete_schedule(schedule: Schedule) -> None:
    schedule.delete()


def _stop_schedule(schedule: Schedule, reason: str, at: datetime) -> None:
    schedule.active, schedule.next_run_at = False, None
    schedule.stopped_reason, schedule.stopped_at = reason[:500], at
    schedule.save()
    Notification.objects.create(
        user=schedule.owner,
        kind=Notification.Kind.SCHEDULE_STOPPED,
        message=f"Schedule {schedule.name} stopped: {reason}",
    )


def _run_schedule(pk: int, now: datetime) -> bool:
    """Submit the latest due time of one schedule; False when another beat has it or it stopped."""
    try:
        with transaction.atomic():
            schedule = (
                Schedule.objects.select_for_update(skip_locked=True, of=("self",))
                .select_related("owner", "project", "compute_resource__policy__group")
                .filter(pk=pk, active=True, next_run_at__lte=now)
                .first()
            )
            if schedule is None:
                return False
            due = latest_due(schedule.cron, now)
            schedule.last_run_at, schedule.next_run_at = due, next_due(schedule.cron, now)
            run = ScheduleRun.objects.create(schedule=schedule, due_at=due)
            refusal = schedule_refusal(schedule)
            if refusal is None:
                try:
                    with transaction.atomic():
                        run.task = submit(
                            user=schedule.owner,
                            compute_resource=schedule.compute_resource,
                            command=schedule.command,
                            gpus=schedule.gpus,
                            nodes=schedule.nodes,
                            name=f"{schedule.name} @ {due:%Y-%m-%d %H:%M}",
                            project=schedule.project,
                            checkpoint=schedule.checkpoint,
                            spec=schedule.spec,
                            channel=Channel.SCHEDULE,
                        )
                except ValidationError as error:
                    refusal = "The task was refused: " + " ".join(error.messages)
            if refusal:
                _stop_schedule(schedule, refusal, now)
                return False
            run.save(update_fields=["task"])
            schedule.save(update_fields=["last_run_at", "next_run_at"])
            return True
    except IntegrityError:
        return False


def submit_due_schedules(now: datetime | None = None) -> int:
    """Submit every schedule that is due at ``now``; returns how many tasks were submitted."""
    now = now or timezone.now()
    due = Schedule.objects.filter(active=True, next_run_at__lte=now).order_by("next_run_at", "pk")
    return sum(_run_schedule(pk, now) for pk in due.values_list("pk", flat=True))
