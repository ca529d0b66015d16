"""Writes for GPU types, pools and the worker daemons that serve them.

A daemon enrols with its pool's enrolment token and gets a worker token of its own. With it, it
heartbeats (answered with stop commands), claims placed work of its pool and reports what became
of it. Every report is idempotent: a retry after a timeout changes nothing and is answered with
the task's state. Only an active worker claims: a lost one heartbeats first. ``sweep`` marks
silent workers lost, releases placements no worker claimed and requeues whatever a worker that is
not active still holds.
"""

import secrets
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import connection, transaction

from apps.accounts.services import hash_token
from apps.core.writes import validated_save
from apps.engine import wake
from apps.pools.models import EnrolmentToken, GpuType, Pool, TaskLog, Worker, WorkerSweep
from apps.pools.runtime import RELATED, run_details, stop_grace_s
from apps.sessions.selectors import claim_blocks
from apps.sessions.services import record_samples
from apps.tasks import services as lifecycle
from apps.tasks.models import Task, TaskEvent
from klique.worker import slots as gpu_slots
from klique.worker.text import storable

ENROLMENT_PREFIX = "kqe_"
WORKER_PREFIX = "kqw_"
RELEASED = Task.StopReason.RELEASED
STOP_GRACE = ("compute_resource__profile__stop_grace_s",)
CLAIM_SCAN_MARGIN = 8


def create_gpu_type(*, name: str, memory_gb: int = 0, generation: int = 0) -> GpuType:
    return validated_save(GpuType(name=name, memory_gb=memory_gb, generation=generation))


def update_gpu_type(gpu_type: GpuType, **fields) -> GpuType:
    """Refused when a smaller memory or older generation breaks a profile's minimum."""
    with transaction.atomic():
        return validated_save(gpu_type, **fields)


def create_pool(
    *,
    name: str,
    kind: str,
    gpu_type: GpuType,
    capacity,
    region: str = "",
    country: str = "",
    enabled: bool = True,
) -> Pool:
    return validated_save(
        Pool(
            name=name,
            kind=kind,
            gpu_type=gpu_type,
            capacity=capacity,
            region=region,
            country=country,
            enabled=enabled,
        )
    )


def update_pool(pool: Pool, **fields) -> Pool:
    """Refused when a new country or GPU type breaks a profile that lists the pool (sovereignty,
    minimum GPU memory or generation), naming the profile. The pool's row is locked first:
    ``apps.policies.services.link_pool`` locks it too, so no profile is linked meanwhile."""
    with transaction.atomic():
        list(Pool.objects.select_for_update().filter(pk=pool.pk).values_list("pk", flat=True))
        return validated_save(pool, **fields)


class InvalidToken(Exception):
    """An enrolment token that is unknown, revoked or expired."""


class NotThisPool(Exception):
    """A worker asked about a task of another pool."""


class NotActive(Exception):
    """A worker that is not active (lost, or retired meanwhile) asked for work. A lost worker is
    active again once it heartbeats: the heartbeat is what names the tasks it must stop."""

    def __init__(self, state: str):
        super().__init__(state)
        self.state = state


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
        nodes=" AND nodes = 1" if single_node else "", lock=" FOR UPDATE SKIP LOCKED" if skip_locked else ""
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [pool_id, largest, limit])
        return [pk for (pk,) in cursor.fetchall()]


def _seconds(name: str) -> timedelta:
    return timedelta(seconds=getattr(settings, name))


def _new_secret(prefix: str) -> tuple[str, str]:
    raw = prefix + secrets.token_urlsafe(32)
    return raw, hash_token(raw)


def issue_enrolment_token(token: EnrolmentToken, *, created_by=None, now: datetime) -> str:
    """Save a new enrolment token (pool, name, expiry set); the token itself is returned here and
    never again."""
    token.name = (token.name or "").strip()
    if not token.name:
        raise ValidationError({"name": "Give the token a name, e.g. rack 12 or the login nodes."})
    if token.expires_at is not None and token.expires_at <= now:
        raise ValidationError({"expires_at": "The expiry must be in the future."})
    raw, token.token_hash = _new_secret(ENROLMENT_PREFIX)
    token.prefix, token.created_by = raw[: len(ENROLMENT_PREFIX) + 6], created_by
    token.save()
    return raw


def revoke_enrolment_token(token: EnrolmentToken, now: datetime) -> None:
    """No new worker enrols with it; workers that already did keep their own tokens."""
    EnrolmentToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=now)


def _release_all(worker: Worker, now: datetime, *, keep=()) -> int:
    """Requeue the active tasks of a worker that is gone (but those in ``keep``); they are charged
    until it was last heard."""
    tasks = list(
        Task.objects.select_for_update()
        .filter(worker=worker, state__in=Task.ACTIVE_STATES)
        .exclude(pk__in=keep)
        .order_by("pk")
    )
    lifecycle.requeue_lost(
        tasks, Task.StopReason.WORKER_LOST, now, ended_at=worker.last_heartbeat or worker.enrolled_at
    )
    return len(tasks)


def enrol(
    token: EnrolmentToken, *, hostname: str, gpus: Decimal, mode: str, version: str = "", now: datetime
) -> tuple[Worker, str]:
    """``enrol_adopting`` for a daemon that left nothing running."""
    worker, raw, _ = enrol_adopting(token, hostname=hostname, gpus=gpus, mode=mode, version=version, now=now)
    return worker, raw


@transaction.atomic
def enrol_adopting(
    token: EnrolmentToken,
    *,
    hostname: str,
    gpus: Decimal,
    mode: str,
    version: str = "",
    running=(),
    now: datetime,
) -> tuple[Worker, str, list["Claimed"]]:
    """Exchange an enrolment token for a worker token. A daemon that enrols again from the same
    host (it was restarted) replaces the previous one, whose tasks go back to their queues, except
    those it names in ``running`` (work it found still running and can keep following) that the
    previous worker held: they move to the new worker as they are, their usage interval still
    open, and come back as the third item, as a claim answers them, on the GPU slots they were
    claimed on. A single-use token (a cloud node's) is bound by its first enrolment to that
    hostname: only that host enrols with it again (its daemon restarted), until it is revoked."""
    if token.single_use:
        token = EnrolmentToken.objects.select_for_update().get(pk=token.pk)
    if not token.is_usable(now):
        raise InvalidToken
    if token.single_use and token.used_at is not None:
        if not Worker.objects.filter(enrolment_token=token, hostname=hostname).exists():
            raise InvalidToken
    previous = list(
        Worker.objects.select_for_update()
        .filter(pool=token.pool, hostname=hostname)
        .exclude(state=Worker.State.RETIRED)
        .order_by("pk")
    )
    adopted = list(
        Task.objects.select_for_update()
        .filter(pk__in=set(running), worker__in=previous, state__in=Task.ACTIVE_STATES)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for worker in previous:
        retire(worker, now, keep=adopted)
    raw, digest = _new_secret(WORKER_PREFIX)
    worker = Worker.objects.create(
        pool=token.pool,
        hostname=hostname,
        gpus=gpus,
        free_gpus=gpus,
        mode=mode,
        version=version,
        token_hash=digest,
        enrolment_token=token,
        last_heartbeat=now,
    )
    used = {"used_at": now} if token.single_use and token.used_at is None else {}
    EnrolmentToken.objects.filter(pk=token.pk).update(last_used_at=now, **used)
    moved = list(Task.objects.select_related(*RELATED).filter(pk__in=adopted).order_by("pk"))
    Task.objects.filter(pk__in=adopted).update(worker=worker)
    for task in moved:
        task.worker = worker
    TaskEvent.objects.bulk_create(
        TaskEvent(
            task=task,
            at=now,
            kind=TaskEvent.Kind.CLAIMED,
            pool_id=task.pool_id,
            reason="adopted",
            detail={"worker": hostname, "worker_id": worker.pk},
        )
        for task in moved
    )
    return worker, raw, claimed(moved, [task.slots for task in moved])


def retire(worker: Worker, now: datetime, *, keep=()) -> int:
    """Take a worker out of service: its token stops working and its tasks (but ``keep``) are
    requeued."""
    with transaction.atomic():
        worker = Worker.objects.select_for_update().get(pk=worker.pk)
        requeued = _release_all(worker, now, keep=keep)
        worker.state = Worker.State.RETIRED
        worker.save(update_fields=["state"])
        return requeued


def _stop_command(task: Task) -> dict:
    """Needs ``compute_resource__profile`` loaded: the stop's grace is the profile's. A session
    never goes back to its queue, so its stop is ``canceled`` whatever the reason (``why``)."""
    ends = task.stop_reason == Task.StopReason.CANCELED or task.kind == Task.Kind.SESSION
    reason = "canceled" if ends else "preempted"
    return {
        "stop": task.pk,
        "reason": reason,
        "why": task.stop_reason,
        "grace_s": stop_grace_s(task.compute_resource.profile),
    }


def heartbeat(
    worker: Worker,
    *,
    tasks: list[int],
    gpus=None,
    free_gpus=None,
    gpu_stats=None,
    sessions: dict[int, dict] | None = None,
    now: datetime,
) -> dict:
    """Record that the worker is alive and answer with its commands. The update of the worker's
    row stands alone (it serialises with the sweep on the row lock); only a requeue is a
    transaction.

    A stop command for each of its tasks being stopped; an ``orphaned`` stop for work it runs that
    is no longer its own (requeued while it was lost, canceled, claimed elsewhere); and tasks it
    claimed but does not run (a claim answer that never reached it) go back to their queues.
    ``sessions``: what it measured of its sessions (``apps.sessions.services.record_samples``).
    """
    _mark_alive(worker, gpus=gpus, free_gpus=free_gpus, gpu_stats=gpu_stats, now=now)
    return _heartbeat_answer(worker, tasks=tasks, sessions=sessions, now=now)


def _mark_alive(worker: Worker, *, gpus=None, free_gpus=None, gpu_stats=None, now: datetime) -> None:
    """The heartbeat's update of the worker's row: alive now, active again if it was lost."""
    fields = {"last_heartbeat": now, "state": Worker.State.ACTIVE, "lost_at": None}
    if gpus is not None:
        fields["gpus"] = gpus
    if free_gpus is not None:
        fields["free_gpus"] = free_gpus
    if gpu_stats is not None:
        fields["gpu_stats"] = gpu_stats
    if not Worker.objects.filter(pk=worker.pk).exclude(state=Worker.State.RETIRED).update(**fields):
        raise InvalidToken  # retired meanwhile: its token no longer acts


def _heartbeat_answer(worker: Worker, *, tasks: list[int], sessions=None, now: datetime) -> dict:
    """The rest of a heartbeat once the worker's row is written: its commands, its sessions'
    samples, and the requeue of what it claimed but does not run."""
    # Without a join: only a task being stopped needs its profile (the stop's grace).
    active = Task.objects.filter(worker=worker, state__in=Task.ACTIVE_STATES)
    held = {pk: (state, at) for pk, state, at in active.values_list("pk", "state", "claimed_at")}
    if sessions:
        record_samples(worker, sessions, held.keys(), now)
    reported = set(tasks)
    stopping = [pk for pk, (state, _) in held.items() if state == Task.State.STOPPING]
    commands = []
    if stopping:
        rows = Task.objects.filter(pk__in=stopping).select_related("compute_resource__profile").order_by("pk")
        commands = [_stop_command(t) for t in rows.only("kind", "stop_reason", *STOP_GRACE)]
    grace = settings.WORKER_STOP_GRACE_S
    commands += [
        {"stop": pk, "reason": "orphaned", "grace_s": grace} for pk in sorted(reported - held.keys())
    ]
    cutoff = now - _seconds("WORKER_HEARTBEAT_TIMEOUT_S") / 2
    missing = [pk for pk, (_, at) in held.items() if pk not in reported and at and at <= cutoff]
    if missing:
        with transaction.atomic():
            locked = Task.objects.select_for_update().filter(pk__in=missing, worker=worker).order_by("pk")
            gone = list(locked.filter(state__in=Task.ACTIVE_STATES))
            lifecycle.requeue_lost(gone, Task.StopReason.UNCLAIMED, now, ended_at=now)
    return {
        "worker": worker.pk,
        "state": Worker.State.ACTIVE,
        "commands": commands,
        "heartbeat_s": settings.WORKER_HEARTBEAT_S,
        "heartbeat_timeout_s": settings.WORKER_HEARTBEAT_TIMEOUT_S,
    }


@dataclass(frozen=True)
class Claimed:
    """A task as a worker gets it: with its GPU slots (claims by slot), the labels it puts on the
    work, its runtime (``apps.pools.runtime``) and a session's block (``apps.sessions.selectors``)."""

    task: Task
    slots: list[int]
    labels: dict
    runtime: dict
    session: dict | None = None


def claimed(tasks: list[Task], slots: list[list[int]] | None = None, blocks=None) -> list[Claimed]:
    """The tasks, loaded with ``apps.pools.runtime.RELATED``, as a worker gets them; ``blocks``:
    their session blocks if already read."""
    details = run_details(tasks)
    blocks = claim_blocks(tasks) if blocks is None else blocks
    slots = slots or [[] for _ in tasks]
    return [Claimed(t, s, *details[t.pk], blocks.get(t.pk)) for t, s in zip(tasks, slots, strict=True)]


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
    locked = Worker.objects.select_for_update().filter(pk=worker.pk).order_by("pk")
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
    task = Task.objects.select_for_update().get(pk=task_id)
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
# (freed GPUs), which asks the engine for a pass (``apps.engine.wake.request_pass``).


def _started(worker: Worker, task: Task, logs: dict, *, at=None, detail=None, now: datetime) -> bool:
    if _is_held(worker, task) and task.state == Task.State.PLACED:
        lifecycle.mark_started(task, _clamp(at, task, now), detail=detail)
    return False


def _exited(
    worker: Worker, task: Task, logs: dict, *, exit_code: int, at=None, log_tail=None, now: datetime
) -> bool:
    _save_log(worker, task, log_tail, now, logs)
    if not _is_held(worker, task):
        return False
    at = _clamp(at, task, now)
    # A session's server exits 0 on the SIGTERM of its stop: that is the stop, not a finished run.
    if task.state == Task.State.STOPPING and (exit_code != 0 or task.kind == Task.Kind.SESSION):
        lifecycle.stopped_many([task], at)
    else:
        lifecycle.finish(task, exit_code=exit_code, at=at)
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


REPORTS = {
    "started": _started,
    "exited": _exited,
    "stopped": _stopped,
    "start_failed": _start_failed,
    "log": _log,
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


def report_exited(worker: Worker, task_id: int, *, exit_code: int, at=None, log_tail=None, now) -> Task:
    """The work ended on its own. If a stop had been asked for meanwhile, a success is kept (the
    work is done; running it again would redo it) and a failure counts as stopped (it may well
    be the stop that ended it), so the task is requeued or canceled as the stop intended."""
    return _report("exited", worker, task_id, exit_code=exit_code, at=at, log_tail=log_tail, now=now)


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
        _mark_alive(worker, **alive, now=now)
        state = Worker.State.ACTIVE
    else:
        locked = Worker.objects.select_for_update().filter(pk=worker.pk)
        state = locked.values_list("state", flat=True).first()
        if state in (None, Worker.State.RETIRED):
            raise InvalidToken
    ids = sorted({task_id for _, task_id, _ in reports})
    found = {}
    if ids:
        found = {t.pk: t for t in Task.objects.select_for_update().filter(pk__in=ids).order_by("pk")}
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
            worker, tasks=heartbeat.get("tasks", []), sessions=heartbeat.get("sessions"), now=now
        )
    if claim is not None:
        if state == Worker.State.ACTIVE:
            synced.claimed = _claim_active(worker, now=now, **claim)
        else:
            synced.claim_error = NotActive(state)
    return synced


def _sweep_clock(now: datetime) -> datetime:
    """Record this sweep; return since when sweeps have run without a gap longer than the timeout."""
    timeout = _seconds("WORKER_HEARTBEAT_TIMEOUT_S")
    clock = WorkerSweep.objects.select_for_update().first()
    if clock is None:
        clock = WorkerSweep.objects.create(last_run_at=now, resumed_at=now)
    elif now - clock.last_run_at > timeout:
        clock.resumed_at = now
    clock.last_run_at = max(clock.last_run_at, now)
    clock.save()
    return clock.resumed_at


@transaction.atomic
def sweep(now: datetime) -> dict[str, int]:
    """Mark workers silent past the heartbeat timeout as lost and requeue their tasks (charged
    until the last heartbeat); release placements no worker claimed within the claim timeout; and
    requeue work still held by a worker that is not active (lost or retired), however it came to
    hold it, so that no claimed task is left placed and charged where no other check looks.

    After a gap in sweeping (the control plane was down), no worker is marked lost until it has
    had a full timeout to check back in.
    """
    timeout = _seconds("WORKER_HEARTBEAT_TIMEOUT_S")
    cutoff = now - timeout
    resumed_at = _sweep_clock(now)
    lost = []
    if resumed_at <= cutoff:
        lost = list(
            Worker.objects.select_for_update(skip_locked=True, of=("self",)).filter(
                state=Worker.State.ACTIVE, last_heartbeat__lt=cutoff
            )
        )
    requeued = 0
    for worker in lost:
        requeued += _release_all(worker, now)
        worker.state, worker.lost_at = Worker.State.LOST, now
        worker.save(update_fields=["state", "lost_at"])
    unclaimed = _unclaimed(now)
    lifecycle.requeue_lost(unclaimed, Task.StopReason.UNCLAIMED, now, ended_at=now)
    return {
        "lost_workers": len(lost),
        "requeued": requeued,
        "unclaimed": len(unclaimed),
        "stranded": _release_stranded(now),
    }


def _unclaimed(now: datetime) -> list[Task]:
    """Placements no worker claimed within their pool's claim timeout (the setting by default)."""
    waiting = Task.objects.select_for_update(skip_locked=True).filter(
        state=Task.State.PLACED, worker__isnull=True
    )
    own = dict(Pool.objects.filter(claim_timeout_s__isnull=False).values_list("pk", "claim_timeout_s"))
    found = list(
        waiting.exclude(pool_id__in=own).filter(placed_at__lt=now - _seconds("WORKER_CLAIM_TIMEOUT_S"))
    )
    for pool_id, timeout_s in sorted(own.items()):
        found += waiting.filter(pool_id=pool_id, placed_at__lt=now - timedelta(seconds=timeout_s))
    return found


def _release_stranded(now: datetime) -> int:
    """Requeue active tasks whose worker is lost or retired (reason ``worker_lost``, charged until
    it was last heard). Marking a worker lost or retiring it requeues its work in the same
    transaction and a claim needs an active worker, so this finds nothing unless a row was left
    by an older release or written by hand; it is the net under every other path."""
    stranded = list(
        Task.objects.select_for_update(skip_locked=True, of=("self",))
        .filter(state__in=Task.ACTIVE_STATES, worker__isnull=False)
        .exclude(worker__state=Worker.State.ACTIVE)
        .select_related("worker")
        .order_by("pk")
    )
    by_worker: dict[int, list[Task]] = {}
    for task in stranded:
        by_worker.setdefault(task.worker_id, []).append(task)
    for tasks in by_worker.values():
        worker = tasks[0].worker
        lifecycle.requeue_lost(
            tasks, Task.StopReason.WORKER_LOST, now, ended_at=worker.last_heartbeat or worker.enrolled_at
        )
    return len(stranded)
