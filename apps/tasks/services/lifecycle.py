"""Writes of the task lifecycle after submission (placement, claim, start, stop, requeue, finish)."""

import json
from collections import defaultdict

from django.db import connection, transaction
from django.db.models import Case, F, Min, Value, When
from django.utils import timezone

from apps.core.sql import array_literal
from apps.ledger import services as ledger
from apps.tasks import wake
from apps.tasks.models import Task, TaskEvent
from apps.tasks.services import dependencies
from apps.tasks.services.checkpoints import lost_gpu_hours
from apps.tasks.services.time_limits import left_s

# The task lifecycle. Every state change of a task after submission goes through these functions;
# they write the task, its events and its usage interval together, in the caller's transaction.
#
#   queued --place--> placed --claim--> running --finish--> succeeded | failed | timed_out
#   placed | running --request_stop--> stopping --stopped--> queued (requeued) | canceled | timed_out
#   a stop of a task no worker has claimed takes effect at once.
#   A session is never requeued: whatever stopped it (idle, reclaim, budget, a lost worker), it
#   ends ``canceled`` with its stop reason kept, and its owner may start another.
#   Work stopped at its time limit ends ``timed_out``; a run that is requeued adds its running
#   time to ``ran_s``, which counts against the limit. Every final state releases or cancels the
#   tasks that run after it (``apps.tasks.services.dependencies``).

NOT_PREEMPTIONS = (Task.StopReason.CANCELED, Task.StopReason.IDLE, Task.StopReason.TIME_LIMIT)

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


def _events(tasks, kind: str, at, *, reason: str | None = "", actor=None, detail=None, lost=None):
    """One event per task, in the tasks' order; ``reason=None`` takes each task's own stop reason;
    ``lost``: each task's lost GPU-hours (a preemption). On PostgreSQL one
    ``INSERT ... SELECT FROM unnest(...)`` whatever the number of tasks."""
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
                lost_gpu_hours=None if lost is None else lost[n],
            )
            for n, task in enumerate(tasks)
        )
        return
    ids = array_literal(task.pk for task in tasks)
    pools = array_literal(task.pool_id for task in tasks)
    actor_id, document = (actor.pk if actor is not None else None), json.dumps(detail or {})
    losses = [None] * len(tasks) if lost is None else [str(x) for x in lost]
    if reason is None:
        reasons = "u.reason"
        params = [at, kind, actor_id, document, ids, pools, losses, [task.stop_reason for task in tasks]]
        arrays = (
            "%s::bigint[], %s::bigint[], %s::numeric[], %s::text[]) WITH ORDINALITY AS u(task, pool, lost, "
            "reason, n)"
        )
    else:
        reasons, params = "%s", [at, kind, reason, actor_id, document, ids, pools, losses]
        arrays = "%s::bigint[], %s::bigint[], %s::numeric[]) WITH ORDINALITY AS u(task, pool, lost, n)"
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO tasks_taskevent (task_id, at, kind, pool_id, reason, actor_id, detail, "
            f"lost_gpu_hours) SELECT u.task, %s, %s, u.pool, {reasons}, %s, %s::jsonb, u.lost "
            f"FROM unnest({arrays} ORDER BY u.n",
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
    if reason == Task.StopReason.MAINTENANCE:
        _to_front(tasks)
    lost = None
    if preempting:
        kind = TaskEvent.Kind.PREEMPTED
        lost = [lost_gpu_hours(task, at) for task in tasks]
    elif reason in (Task.StopReason.IDLE, Task.StopReason.TIME_LIMIT):
        kind = TaskEvent.Kind.STOP_REQUESTED
    else:
        kind = TaskEvent.Kind.CANCEL_REQUESTED
    _events(tasks, kind, at, reason=reason, actor=actor, detail=detail, lost=lost)
    stopped_many([t for t in tasks if t.worker_id is None], at)


def _to_front(tasks) -> None:
    """Work preempted for a maintenance window goes back to the front of its queue: below the
    smallest queue seq waiting in its compute resource, in the order of its old seqs (the
    simulator's rule). Queue seqs stay far above -2**40, so a project's priority still comes first
    (``apps.tasks.selectors.with_queue_rank``)."""
    by_resource = defaultdict(list)
    for task in tasks:
        by_resource[task.compute_resource_id].append(task)
    lowest = dict(
        Task.objects.filter(compute_resource_id__in=list(by_resource), state=Task.State.QUEUED)
        .values("compute_resource_id")
        .annotate(m=Min("queue_seq"))
        .values_list("compute_resource_id", "m")
    )
    moved = []
    for resource, group in by_resource.items():
        group.sort(key=lambda t: (t.queue_seq, t.pk))
        waiting = lowest.get(resource)
        first = min(group[0].queue_seq, group[0].queue_seq if waiting is None else waiting) - len(group)
        for offset, task in enumerate(group):
            task.queue_seq = first + offset
            moved.append(task)
    Task.objects.bulk_update(moved, ["queue_seq"])


@transaction.atomic
def stopped_many(tasks, at, *, ended_at=None) -> None:
    """The work of stopping tasks has really stopped: close their intervals (at ``ended_at`` if
    given, else ``at``) and requeue them in their old place, or mark them canceled (timed out when
    stopped at their time limit, or when a preempted run used up what was left of it). A session is
    never requeued: it ends (``canceled``, its stop reason kept)."""
    if not tasks:
        return
    ledger.close_intervals([t.pk for t in tasks], ended_at or at)
    canceled = [t for t in tasks if t.stop_reason == Task.StopReason.CANCELED]
    timed_out = [t for t in tasks if t.stop_reason == Task.StopReason.TIME_LIMIT and t not in canceled]
    ended = [t for t in tasks if t.kind == Task.Kind.SESSION and t not in canceled and t not in timed_out]
    requeued = [t for t in tasks if t not in canceled and t not in ended and t not in timed_out]
    _add_ran(requeued, ended_at or at)
    spent = [t for t in requeued if t.time_limit_s is not None and t.ran_s >= t.time_limit_s]
    timed_out += spent
    requeued = [t for t in requeued if t not in spent]
    for task in canceled + ended:
        task.state, task.ended_at = Task.State.CANCELED, at
    for task in timed_out:
        task.state, task.ended_at = Task.State.TIMED_OUT, at
    _events(canceled, TaskEvent.Kind.CANCELED, at)
    _events(ended, TaskEvent.Kind.ENDED, at, reason=None)
    _events(timed_out, TaskEvent.Kind.TIMED_OUT, at, reason=Task.StopReason.TIME_LIMIT)
    _events(requeued, TaskEvent.Kind.REQUEUED, at, reason=None)
    for task in requeued:
        task.state, task.pool, task.worker, task.stop_reason = Task.State.QUEUED, None, None, ""
        task.placed_at = task.claimed_at = task.started_at = None
    _update(canceled + ended, state=Task.State.CANCELED, ended_at=at)
    _update(timed_out, state=Task.State.TIMED_OUT, ended_at=at)
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
    dependencies.ended(canceled + ended + timed_out, at)


def _add_ran(tasks, until) -> None:
    """A limited task's run ends without ending the task: its running time counts on."""
    for task in tasks:
        if task.time_limit_s is None or task.started_at is None:
            continue
        ran = max(0, int((until - task.started_at).total_seconds()))
        task.ran_s += ran
        Task.objects.filter(pk=task.pk).update(ran_s=F("ran_s") + ran)


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
    losses = [lost_gpu_hours(task, ended_at) for task in lost]
    _events(lost, TaskEvent.Kind.PREEMPTED, at, reason=reason, lost=losses)
    stopped_many(tasks, at, ended_at=ended_at)


def finish(task: Task, *, exit_code: int, at, timed_out: bool = False) -> Task:
    """The work ended on its own: succeeded with exit code 0, failed otherwise, timed out when its
    worker stopped it at its time limit (``timed_out``: Slurm's TIMEOUT, a pod's deadline, the
    daemon's own timer; whatever the code) or when it ended with an error once its limit was
    reached. Work that ends
    on its own while a stop is pending (it finished before its worker got the stop) is done, not
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
        if _timed_out(task, at, timed_out, exit_code):
            task.state, kind = Task.State.TIMED_OUT, TaskEvent.Kind.TIMED_OUT
            reason = Task.StopReason.TIME_LIMIT
        elif exit_code == 0:
            task.state, kind, reason = Task.State.SUCCEEDED, TaskEvent.Kind.SUCCEEDED, ""
        else:
            task.state, kind, reason = Task.State.FAILED, TaskEvent.Kind.FAILED, ""
        task.exit_code, task.ended_at, task.stop_reason = exit_code, at, ""
        _update([task], **_lifecycle_values(task))
        _events([task], kind, at, reason=reason, detail={"exit_code": exit_code})
        dependencies.ended([task], at)
    return task


def _timed_out(task: Task, at, reported: bool, exit_code: int) -> bool:
    """Its worker stopped it at its limit (whatever the code: work may catch the stop, save a
    checkpoint and exit 0), or it ended with an error once its limit was asked for or reached."""
    if task.time_limit_s is None:
        return False
    if reported:
        return True
    if exit_code == 0:
        return False
    if task.stop_reason == Task.StopReason.TIME_LIMIT:
        return True
    left = left_s(task, at)
    return left is not None and left <= 0


@transaction.atomic
def cancel(task: Task, *, actor=None, at=None) -> Task:
    """Cancel a task: at once while it waits, after its work stops when it is placed or running."""
    at = at or timezone.now()
    task = Task.objects.select_for_update(no_key=True).get(pk=task.pk)
    if task.state in Task.FINAL_STATES or task.stop_reason == Task.StopReason.CANCELED:
        return task
    if task.state == Task.State.QUEUED:
        task.state, task.ended_at, task.verdict = Task.State.CANCELED, at, {}
        task.save(update_fields=LIFECYCLE_FIELDS)
        _events([task], TaskEvent.Kind.CANCELED, at, actor=actor)
        dependencies.ended([task], at)
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
        dependencies.ended([task], at)
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
