"""Writes for the worker daemons: enrolment, heartbeats, retirement and the sweep.

A daemon enrols with its pool's enrolment token and gets a worker token of its own. With it, it
heartbeats (answered with stop commands), claims placed work of its pool and reports what became
of it. Every report is idempotent: a retry after a timeout changes nothing and is answered with
the task's state. Only an active worker claims: a lost one heartbeats first. ``sweep`` marks
silent workers lost, releases placements no worker claimed and requeues whatever a worker that is
not active still holds.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, Value

from apps.pools.models import (
    EnrolmentToken,
    Pool,
    Worker,
    WorkerSweep,
)
from apps.pools.services.estate import record_observed
from apps.pools.services.tokens import WORKER_PREFIX, new_secret
from apps.sessions.selectors import claim_blocks
from apps.sessions.services import record_samples
from apps.tasks import services as lifecycle
from apps.tasks.models import Task, TaskEvent
from apps.workers import heartbeats
from apps.workers.runtime import RELATED, run_details, stop_grace_s
from apps.workers.services import rows

RELEASED = Task.StopReason.RELEASED
STOP_GRACE = ("compute_resource__profile__stop_grace_s",)


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


def _seconds(name: str) -> timedelta:
    return timedelta(seconds=getattr(settings, name))


def _release_all(worker: Worker, now: datetime, *, keep=()) -> int:
    """Requeue the active tasks of a worker that is gone (but those in ``keep``); they are charged
    until it was last heard."""
    tasks = list(
        Task.objects.select_for_update(no_key=True)
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


@dataclass(frozen=True)
class Claimed:
    """A task as a worker gets it: with its GPU slots (claims by slot), the labels it puts on the
    work, its runtime (``apps.workers.runtime``) and a session's block (``apps.sessions.selectors``)."""

    task: Task
    slots: list[int]
    labels: dict
    runtime: dict
    session: dict | None = None


def claimed(tasks: list[Task], slots: list[list[int]] | None = None, blocks=None) -> list[Claimed]:
    """The tasks, loaded with ``apps.workers.runtime.RELATED``, as a worker gets them; ``blocks``:
    their session blocks if already read."""
    details = run_details(tasks)
    blocks = claim_blocks(tasks) if blocks is None else blocks
    slots = slots or [[] for _ in tasks]
    return [Claimed(t, s, *details[t.pk], blocks.get(t.pk)) for t, s in zip(tasks, slots, strict=True)]


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
        token = EnrolmentToken.objects.select_for_update(no_key=True).get(pk=token.pk)
    if not token.is_usable(now):
        raise InvalidToken
    if token.single_use and token.used_at is not None:
        if not Worker.objects.filter(enrolment_token=token, hostname=hostname).exists():
            raise InvalidToken
    previous = list(
        Worker.objects.select_for_update(no_key=True)
        .filter(pool=token.pool, hostname=hostname)
        .exclude(state=Worker.State.RETIRED)
        .order_by("pk")
    )
    adopted = list(
        Task.objects.select_for_update(no_key=True)
        .filter(pk__in=set(running), worker__in=previous, state__in=Task.ACTIVE_STATES)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    for worker in previous:
        retire(worker, now, keep=adopted, record=False)
    raw, digest = new_secret(WORKER_PREFIX)
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
        heartbeat_timeout=heartbeats.timing().timeout,
    )
    record_observed(token.pool_id, now)
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


def retire(worker: Worker, now: datetime, *, keep=(), record: bool = True) -> int:
    """Take a worker out of service: its token stops working and its tasks (but ``keep``) are
    requeued. ``record``: the pool's observed capacity changes (an enrolment replacing it records
    once, after the new worker)."""
    with transaction.atomic():
        worker = Worker.objects.select_for_update(no_key=True).get(pk=worker.pk)
        requeued = _release_all(worker, now, keep=keep)
        worker.state = Worker.State.RETIRED
        worker.save(update_fields=["state"])
        if record:
            record_observed(worker.pool_id, now)
        return requeued


def _stop_command(task: Task) -> dict:
    """Needs ``compute_resource__profile`` loaded: the stop's grace is the profile's. A session
    never goes back to its queue, nor does work stopped at its time limit, so their stop is
    ``canceled`` whatever the reason (``why``)."""
    ends = (
        task.stop_reason in (Task.StopReason.CANCELED, Task.StopReason.TIME_LIMIT)
        or task.kind == Task.Kind.SESSION
    )
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
    told = _mark_alive(worker, gpus=gpus, free_gpus=free_gpus, gpu_stats=gpu_stats, now=now)
    return _heartbeat_answer(worker, tasks=tasks, sessions=sessions, told=told, now=now)


def _mark_alive(
    worker: Worker, *, gpus=None, free_gpus=None, gpu_stats=None, now: datetime
) -> heartbeats.Timing:
    """The heartbeat's update of the worker's row: alive now, active again if it was lost, with
    the heartbeat timing it is told (returned, for the answer)."""
    told = heartbeats.timing()
    fields = {
        "last_heartbeat": now,
        "heartbeat_timeout": told.timeout,
        "state": Worker.State.ACTIVE,
        "lost_at": None,
    }
    if gpus is not None:
        fields["gpus"] = gpus
    if free_gpus is not None:
        fields["free_gpus"] = free_gpus
    if gpu_stats is not None:
        fields["gpu_stats"] = gpu_stats
    before = rows.write_alive(worker.pk, fields)
    if before is None:
        raise InvalidToken  # retired meanwhile: its token no longer acts
    state, had_gpus = before
    if state != Worker.State.ACTIVE or (gpus is not None and Decimal(gpus) != had_gpus):
        with transaction.atomic():
            record_observed(
                worker.pool_id, now
            )  # back from lost, or other GPUs: the pool's live GPUs changed
    worker.state, worker.gpus = Worker.State.ACTIVE, had_gpus if gpus is None else Decimal(gpus)
    return told


def _heartbeat_answer(
    worker: Worker, *, tasks: list[int], told: heartbeats.Timing, sessions=None, now: datetime
) -> dict:
    """The rest of a heartbeat once the worker's row is written: its commands, its sessions'
    samples, and the requeue of what it claimed but does not run."""
    # Without a join: only a task being stopped needs its profile (the stop's grace).
    held = rows.held(worker.pk)
    if sessions:
        record_samples(worker, sessions, held.keys(), now)
    reported = set(tasks)
    stopping = [pk for pk, (state, _) in held.items() if state == Task.State.STOPPING]
    commands = []
    if stopping:
        loaded = (
            Task.objects.filter(pk__in=stopping).select_related("compute_resource__profile").order_by("pk")
        )
        commands = [_stop_command(t) for t in loaded.only("kind", "stop_reason", *STOP_GRACE)]
    grace = settings.WORKER_STOP_GRACE_S
    commands += [
        {"stop": pk, "reason": "orphaned", "grace_s": grace} for pk in sorted(reported - held.keys())
    ]
    cutoff = now - told.timeout / 2
    missing = [pk for pk, (_, at) in held.items() if pk not in reported and at and at <= cutoff]
    if missing:
        with transaction.atomic():
            locked = (
                Task.objects.select_for_update(no_key=True)
                .filter(pk__in=missing, worker=worker)
                .order_by("pk")
            )
            gone = list(locked.filter(state__in=Task.ACTIVE_STATES))
            lifecycle.requeue_lost(gone, Task.StopReason.UNCLAIMED, now, ended_at=now)
    return {
        "worker": worker.pk,
        "state": Worker.State.ACTIVE,
        "commands": commands,
        "heartbeat_s": told.interval_s,
        "heartbeat_timeout_s": told.timeout_s,
        "claim_max_s": told.interval_s,
    }


def _sweep_clock(now: datetime, timeout: timedelta) -> datetime:
    """Record this sweep; return since when sweeps have run without a gap longer than the timeout."""
    clock = WorkerSweep.objects.select_for_update(no_key=True).first()
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
    timeout = heartbeats.timing().timeout
    resumed_at = _sweep_clock(now, timeout)
    lost = []
    if resumed_at <= now - timeout:
        told = Q(heartbeat_timeout__isnull=True) | Q(last_heartbeat__lt=Value(now) - F("heartbeat_timeout"))
        silent = Q(last_heartbeat__lt=now - timeout) & told
        lost = list(
            Worker.objects.select_for_update(no_key=True, skip_locked=True, of=("self",)).filter(
                silent, state=Worker.State.ACTIVE
            )
        )
    requeued = 0
    for worker in lost:
        requeued += _release_all(worker, now)
        worker.state, worker.lost_at = Worker.State.LOST, now
        worker.save(update_fields=["state", "lost_at"])
    for pool_id in sorted({worker.pool_id for worker in lost}):
        record_observed(pool_id, now)
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
    waiting = Task.objects.select_for_update(no_key=True, skip_locked=True).filter(
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
        Task.objects.select_for_update(no_key=True, skip_locked=True, of=("self",))
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
