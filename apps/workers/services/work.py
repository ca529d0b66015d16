"""Writes of the work a daemon does: claiming placed tasks of its pool, reporting what became of
them (each report idempotent), and the sync that reconciles what it runs with what the engine
placed."""

from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction

from apps.pools.models import (
    TaskLog,
    Worker,
)
from apps.sessions.selectors import claim_blocks
from apps.tasks import services as lifecycle
from apps.tasks import wake
from apps.tasks.models import Task, TaskEvent
from apps.workers.runtime import RELATED
from apps.workers.services.daemons import (
    RELEASED,
    Claimed,
    InvalidToken,
    NotActive,
    NotThisPool,
    _heartbeat_answer,
    _mark_alive,
    claimed,
)
from klique.worker import slots as gpu_slots
from klique.worker.text import storable

CLAIM_SCAN_MARGIN = 8

# The read of every daemon's poll, written out: the ORM took longer to build it than PostgreSQL
# took to answer. It reads the partial index ``task_claimable_idx`` in claim order (oldest
# placement, then queue order) and skips rows other claimers hold (not on SQLite, which locks
# the whole database for a write anyway).
CLAIMABLE_SQL = (
    f"SELECT id FROM {Task._meta.db_table} WHERE state = 'placed' AND worker_id IS NULL AND pool_id = %s"
    " AND gpus <= %s{nodes} ORDER BY placed_at, queue_seq, id LIMIT %s{lock}"
)


def _claimable(pool_id: int, largest: Decimal, single_node: bool, limit: int) -> list[int]:
    skip_locked = connection.features.has_select_for_update_skip_locked
    sql = CLAIMABLE_SQL.format(
        nodes=" AND nodes = 1" if single_node else "",
        lock=" FOR NO KEY UPDATE SKIP LOCKED" if skip_locked else "",
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [pool_id, largest, limit])
        return [pk for (pk,) in cursor.fetchall()]


SESSION_GONE = "its session record was deleted, so its server cannot be started; start a new session"


@transaction.atomic
def claim(
    worker: Worker,
    *,
    free: list[int] | None,
    free_gpus: Decimal | None,
    max_tasks: int,
    now,
    multi_node: bool = False,
) -> list[Claimed]:
    """Claim the next placed tasks of the worker's pool that fit its free GPUs, oldest placement
    first, then queue order. ``free`` lists each GPU's free milli-GPUs (the tasks get slots on
    them); ``free_gpus`` is a plain total for a worker whose scheduler picks the GPUs. Locked rows
    are skipped, so concurrent claimers never get the same task.

    Only an active worker claims. Its row is locked first, so a claim and the sweep that marks the
    worker lost never interleave: either the claim comes first (and the sweep requeues what it
    took) or the worker is already lost and the claim is refused until it heartbeats again. A lost
    worker holds nothing (the sweep took its tasks back), so nothing it claimed could stay placed
    and charged where no sweep looks. A claim does not count as a heartbeat: only the heartbeat
    says which tasks the worker still runs.

    A multi-node task (``nodes`` > 1) goes only to a worker that says it runs them (``multi_node``)
    and claims a plain total: it takes GPUs x nodes of ``free_gpus``; a claim by slots skips it.

    A session task is never handed out without its session block: one whose session row is gone
    fails at once with that reason (its display command is not a server to run)."""
    locked = Worker.objects.select_for_update(no_key=True).filter(pk=worker.pk).order_by("pk")
    state = locked.values_list("state", flat=True).first()
    if state != Worker.State.ACTIVE:
        raise NotActive(state or Worker.State.RETIRED)
    return _claim_active(
        worker, free=free, free_gpus=free_gpus, max_tasks=max_tasks, now=now, multi_node=multi_node
    )


def _claim_active(
    worker: Worker,
    *,
    free: list[int] | None,
    free_gpus: Decimal | None,
    max_tasks: int,
    now,
    multi_node: bool,
) -> list[Claimed]:
    """``claim`` for a worker whose row this transaction holds locked and knows active."""
    if free is not None:
        largest = gpu_slots.largest(free)
    else:
        largest = gpu_slots.milli(free_gpus)
    # Ids first (a poll that finds nothing, the common one, stops here); then the rows this
    # transaction now holds locked, with what the worker gets.
    single = free is not None or not multi_node
    largest_gpus = Decimal(largest) / gpu_slots.WHOLE
    ids = _claimable(worker.pool_id, largest_gpus, single, 2 * max_tasks + CLAIM_SCAN_MARGIN)
    if not ids:
        return []
    order = ("placed_at", "queue_seq", "pk")
    picked: list[Task] = []
    slots: list[list[int]] = []
    left = largest
    scanned = list(Task.objects.select_related(*RELATED).filter(pk__in=ids).order_by(*order))
    blocks = claim_blocks(scanned)
    for task in scanned:
        if task.kind == Task.Kind.SESSION and task.pk not in blocks:
            lifecycle.start_failed(task, error=SESSION_GONE, at=now, attempts=1, worker=worker.hostname)
            continue
        size = gpu_slots.milli(task.gpus)
        if free is not None:
            chosen = gpu_slots.fit(free, size)
            if chosen is None:
                continue
            gpu_slots.take(free, chosen, size)
        elif size * task.nodes > left:
            continue
        else:
            chosen, left = [], left - size * task.nodes
        picked.append(task)
        slots.append(chosen)
        if len(picked) == max_tasks:
            break
    # ``now`` was taken as the request began, maybe before a pass committed the placement it takes
    now = max([now, *(task.placed_at for task in picked)])
    lifecycle.claim_many(worker, picked, now, slots)
    return claimed(picked, slots, blocks)


def _clamp(at: datetime | None, task: Task, now: datetime) -> datetime:
    """A time the worker reports, kept between the claim and now (the worker's clock may drift)."""
    if at is None or at > now:
        return now
    floor = task.claimed_at or task.placed_at
    return max(at, floor) if floor else at


def _may_report(worker: Worker, task: Task) -> bool:
    """The task is on the worker's pool, or this worker once claimed it (a retried report can
    arrive after the task went back to its queue)."""
    if task.pool_id == worker.pool_id:
        return True
    return task.events.filter(kind=TaskEvent.Kind.CLAIMED, detail__worker_id=worker.pk).exists()


def _locked_task(worker: Worker, task_id: int) -> Task:
    task = Task.objects.select_for_update(no_key=True).get(pk=task_id)
    if not _may_report(worker, task):
        raise NotThisPool
    return task


def _is_held(worker: Worker, task: Task) -> bool:
    return task.worker_id == worker.pk and task.state in Task.ACTIVE_STATES


def _save_log(worker: Worker, task: Task, tail: str | None, now: datetime, logs: dict) -> None:
    """Keep the output of the worker's own task (a retried report after the end included); another
    worker of the pool cannot overwrite it. Output is stored cleaned (``storable``), never refused.
    Collected in ``logs`` (the last tail of each task wins) and written by ``_write_logs``."""
    if tail is None or task.worker_id != worker.pk:
        return
    kept = storable(tail[-TaskLog.MAX_CHARS :])
    logs[task.pk] = TaskLog(task_id=task.pk, worker=worker, tail=kept, updated_at=now)


def _write_logs(logs: dict) -> None:
    """The collected tails in one upsert (no savepoint, unlike ``update_or_create``)."""
    if logs:
        TaskLog.objects.bulk_create(
            logs.values(),
            update_conflicts=True,
            unique_fields=["task"],
            update_fields=["worker", "tail", "updated_at"],
        )


# The reports. Each takes the task locked and ``_may_report``, and says whether it ended work
# (freed GPUs), which asks the engine for a pass (``apps.tasks.wake.request_pass``).


def _started(worker: Worker, task: Task, logs: dict, *, at=None, detail=None, now: datetime) -> bool:
    if _is_held(worker, task) and task.state == Task.State.PLACED:
        lifecycle.mark_started(task, _clamp(at, task, now), detail=detail)
    return False


def _exited(
    worker: Worker,
    task: Task,
    logs: dict,
    *,
    exit_code: int,
    at=None,
    log_tail=None,
    timed_out: bool = False,
    now: datetime,
) -> bool:
    _save_log(worker, task, log_tail, now, logs)
    if not _is_held(worker, task):
        return False
    at = _clamp(at, task, now)
    # Work stopped at its time limit ends there, whatever stop was asked for meanwhile.
    timed_out = timed_out and task.time_limit_s is not None and task.kind != Task.Kind.SESSION
    # A session's server exits 0 on the SIGTERM of its stop: that is the stop, not a finished run.
    stopped = exit_code != 0 or task.kind == Task.Kind.SESSION
    if task.state == Task.State.STOPPING and stopped and not timed_out:
        lifecycle.stopped_many([task], at)
    else:
        lifecycle.finish(task, exit_code=exit_code, at=at, timed_out=timed_out)
    return True


def _stopped(worker: Worker, task: Task, logs: dict, *, at=None, log_tail=None, now: datetime) -> bool:
    _save_log(worker, task, log_tail, now, logs)
    if not _is_held(worker, task):
        return False
    at = _clamp(at, task, now)
    if task.state == Task.State.STOPPING:
        lifecycle.stopped_many([task], at)
    else:
        lifecycle.requeue_lost([task], RELEASED, now, ended_at=at)
    return True


def _start_failed(worker: Worker, task: Task, logs: dict, *, error: str = "", at=None, now: datetime) -> bool:
    if not _is_held(worker, task):
        return False
    lifecycle.start_failed(
        task,
        error=storable(error),
        at=_clamp(at, task, now),
        attempts=settings.WORKER_START_ATTEMPTS,
        worker=worker.hostname,
    )
    return True


def _log(worker: Worker, task: Task, logs: dict, *, tail: str, now: datetime) -> bool:
    _save_log(worker, task, tail, now, logs)
    return False


def _checkpoint(worker: Worker, task: Task, logs: dict, *, at: datetime, now: datetime) -> bool:
    """The work checkpointed (its checkpoint file changed): a time ahead of now (the worker's clock
    may drift) counts as now; one before the run's start, or of work no longer running, is left."""
    if _is_held(worker, task) and task.started_at is not None and at >= task.started_at:
        if task.state in (Task.State.RUNNING, Task.State.STOPPING):
            lifecycle.record_checkpoint(task, min(at, now), now=now)
    return False


REPORTS = {
    "started": _started,
    "exited": _exited,
    "stopped": _stopped,
    "start_failed": _start_failed,
    "log": _log,
    "checkpoint": _checkpoint,
}


@transaction.atomic
def _report(what: str, worker: Worker, task_id: int, **body) -> Task:
    task = _locked_task(worker, task_id)
    logs: dict = {}
    if REPORTS[what](worker, task, logs, **body):
        wake.request_pass()
    _write_logs(logs)
    return task


def report_started(worker: Worker, task_id: int, *, at=None, detail=None, now: datetime) -> Task:
    """The task's work runs (the subprocess started, or Slurm allocated the job)."""
    return _report("started", worker, task_id, at=at, detail=detail, now=now)


def report_exited(
    worker: Worker, task_id: int, *, exit_code: int, at=None, log_tail=None, timed_out=False, now
) -> Task:
    """The work ended on its own. If a stop had been asked for meanwhile, a success is kept (the
    work is done; running it again would redo it) and a failure counts as stopped (it may well
    be the stop that ended it), so the task is requeued or canceled as the stop intended.
    ``timed_out``: the worker stopped it at its time limit, so it ends there (timed out)."""
    body = {"exit_code": exit_code, "at": at, "log_tail": log_tail, "timed_out": timed_out}
    return _report("exited", worker, task_id, **body, now=now)


def report_stopped(worker: Worker, task_id: int, *, at=None, log_tail=None, now: datetime) -> Task:
    """The work no longer runs. After a stop command the task is requeued (or canceled); without
    one, the pool let go of it (Slurm requeued the job, say) and it goes back to its queue."""
    return _report("stopped", worker, task_id, at=at, log_tail=log_tail, now=now)


def report_start_failed(worker: Worker, task_id: int, *, error: str = "", at=None, now: datetime) -> Task:
    """The worker could not start the work. It is not the pool letting go of it (``stopped``): the
    task is tried again, up to ``WORKER_START_ATTEMPTS`` starts in all, then it ends failed with
    the error (``apps.tasks.services.start_failed``)."""
    return _report("start_failed", worker, task_id, error=error, at=at, now=now)


def report_log(worker: Worker, task_id: int, *, tail: str, now: datetime) -> Task:
    return _report("log", worker, task_id, tail=tail, now=now)


def report_checkpoint(worker: Worker, task_id: int, *, at: datetime, now: datetime) -> Task:
    """The task's work checkpointed at ``at`` (``apps.tasks.services.record_checkpoint``)."""
    return _report("checkpoint", worker, task_id, at=at, now=now)


@dataclass(frozen=True)
class Reported:
    """A report's answer: the task's state right after it, and whether the task is still held."""

    task: int
    state: str
    yours: bool


@dataclass
class Synced:
    """What a sync did: per report (in order) a ``Reported`` or ``NotThisPool``; the heartbeat's
    answer (None without one); the claimed tasks; and ``NotActive`` when the claim was refused."""

    reports: list
    heartbeat: dict | None = None
    claimed: list[Claimed] = field(default_factory=list)
    claim_error: NotActive | None = None


@transaction.atomic
def sync(
    worker: Worker,
    *,
    reports: list[tuple[str, int, dict]],
    heartbeat: dict | None = None,
    claim: dict | None = None,
    now: datetime,
) -> Synced:
    """One poll of a daemon in one transaction: its reports ``(what, task id, body)`` in order,
    then its heartbeat, then its claim, each with the semantics of its own call. The worker's row
    is locked first and the reported tasks next, in id order (as the sweep and the engine lock),
    so a sync never deadlocks with them. The heartbeat's write of the worker's row comes first
    (it is the lock), which only the rest of this transaction can see. Asks for one engine pass
    when a report ended work. Raises ``InvalidToken`` for a retired worker.

    ``claim``: the keyword arguments of ``claim`` but ``now``; a lost worker's claim is refused
    unless the same sync heartbeats."""
    if heartbeat is not None:
        alive = {key: heartbeat.get(key) for key in ("gpus", "free_gpus", "gpu_stats")}
        told = _mark_alive(worker, **alive, now=now)
        state = Worker.State.ACTIVE
    else:
        locked = Worker.objects.select_for_update(no_key=True).filter(pk=worker.pk)
        state = locked.values_list("state", flat=True).first()
        if state in (None, Worker.State.RETIRED):
            raise InvalidToken
    ids = sorted({task_id for _, task_id, _ in reports})
    found = {}
    if ids:
        found = {
            t.pk: t for t in Task.objects.select_for_update(no_key=True).filter(pk__in=ids).order_by("pk")
        }
    allowed: dict[int, bool] = {}
    answers: list = []
    logs: dict = {}
    ended = False
    for what, task_id, body in reports:
        task = found.get(task_id)
        if task is not None and task_id not in allowed:
            allowed[task_id] = _may_report(worker, task)
        if task is None or not allowed[task_id]:
            answers.append(NotThisPool(task_id))
            continue
        ended |= REPORTS[what](worker, task, logs, **body, now=now)
        answers.append(Reported(task.pk, task.state, _is_held(worker, task)))
    _write_logs(logs)
    if ended:
        wake.request_pass()
    synced = Synced(reports=answers)
    if heartbeat is not None:
        synced.heartbeat = _heartbeat_answer(
            worker, tasks=heartbeat.get("tasks", []), sessions=heartbeat.get("sessions"), told=told, now=now
        )
    if claim is not None:
        if state == Worker.State.ACTIVE:
            synced.claimed = _claim_active(worker, now=now, **claim)
        else:
            synced.claim_error = NotActive(state)
    return synced
