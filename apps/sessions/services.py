"""Writes for sessions: start one (a task of kind ``session`` through ``apps.tasks.services.submit``),
record what the daemons measure, and ``check_idle``: the one place that decides a session has
been idle too long, warns its owner and stops it (stop reason ``idle``, the limit on the event).

The idle rule, per limit: a condition holds from the first sample that shows it until a sample
that does not; a measurement that is null never counts as idle. It fires when it has held for its
limit (``now >= since + limit``); the owner is warned SESSION_IDLE_WARNING_S before, once per
idle stretch and limit (a limit whose condition clears may warn again), and not when a limit
fires: the stop's own notice says why.

The times come from the worker's samples, never earlier than the session's start or the previous
sample, never later than their receipt: a worker whose clock lags cannot make a session idle for
longer than it has run.
"""

import logging
import shlex
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.accounts.models import Group, Notification
from apps.core import events
from apps.policies.models import ComputeResource
from apps.sessions.models import Session, SessionKind
from apps.sessions.selectors import idle_limit_rows, limits_for
from apps.tasks import services as tasks
from apps.tasks.models import Channel, Task

log = logging.getLogger("klique.sessions")

LIMIT_WORDS = {
    "lifetime": "its maximum lifetime",
    "cpu": "CPU below {cpu_below_pct:g} %",
    "gpu": "GPU utilisation below {gpu_below_pct:g} %",
    "network": "no network traffic",
    "jupyter": "no activity in Jupyter",
}
LIMIT_FIELDS = {
    "lifetime": "max_lifetime_s",
    "cpu": "cpu_idle_s",
    "gpu": "gpu_idle_s",
    "network": "net_idle_s",
    "jupyter": "jupyter_idle_s",
}


def default_kind() -> SessionKind | None:
    kinds = SessionKind.objects.filter(enabled=True)
    return kinds.filter(type=SessionKind.Type.JUPYTER).first() or kinds.first()


def session_command(kind: SessionKind) -> str:
    """The task's command as people read it; the daemon starts the server from the claim's block."""
    return shlex.join(kind.command) if kind.type == SessionKind.Type.PORT else "jupyter server"


@transaction.atomic
def start(
    *,
    user,
    compute_resource: ComputeResource,
    session_kind: SessionKind | None = None,
    gpus=None,
    name: str = "",
    project=None,
    channel: str = Channel.API,
    agent=None,
    priority=None,
) -> Task:
    """Start a session: a task of kind ``session`` under the same reservation, limit, budget,
    priority and preemption rules as any other, charged from its placement."""
    session_kind = session_kind or default_kind()
    if session_kind is None:
        raise ValidationError({"session_kind": "No session kind is offered; ask IT to add one."})
    if not session_kind.enabled:
        raise ValidationError({"session_kind": f"Session kind {session_kind} is not offered any more."})
    task = tasks.submit(
        user=user,
        compute_resource=compute_resource,
        command=session_command(session_kind),
        gpus=gpus,
        nodes=1,
        name=name or f"{session_kind} session",
        project=project,
        spec={"session_kind": session_kind.name},
        channel=channel,
        kind=Task.Kind.SESSION,
        agent=agent,
        priority=priority,
    )
    Session.objects.create(task=task, kind=session_kind)
    return task


MEASURED_FIELDS = [
    "cpu_percent",
    "gpu_util",
    "net_bytes",
    "connections",
    "last_activity",
    "sampled_at",
    "cpu_idle_since",
    "gpu_idle_since",
    "net_idle_since",
    "url",
    "ready",
    "ready_at",
]


SESSION_FIELDS = ("compute_resource", "gpus", "name", "project", "channel", "agent", "priority")


def submit_task(
    *, user, kind: str = Task.Kind.BATCH, session_kind: SessionKind | None = None, **fields
) -> Task:
    """A task as the API submits it: a session through ``start`` (which takes only the fields a
    session has), any other kind through ``apps.tasks.services.submit``."""
    if kind == Task.Kind.SESSION:
        kept = {name: fields[name] for name in SESSION_FIELDS if fields.get(name) is not None}
        return start(user=user, session_kind=session_kind, **kept)
    return tasks.submit(user=user, **fields)


def _since(holds: bool, since: datetime | None, at: datetime) -> datetime | None:
    if not holds:
        return None
    return since or at


def _within(at: datetime, floor: datetime | None, ceiling: datetime) -> datetime:
    at = min(at, ceiling)
    return max(at, floor) if floor else at


def _stretches(session: Session) -> dict[str, datetime | None]:
    """Since when each measured idle condition holds (Jupyter's: its last activity)."""
    return {
        "cpu": session.cpu_idle_since,
        "gpu": session.gpu_idle_since,
        "network": session.net_idle_since,
        "jupyter": session.last_activity,
    }


def record_samples(worker, samples: dict[int, dict], held: set[int], now: datetime) -> int:
    """Store the daemon's samples of its sessions (from its heartbeat). Samples of tasks that are
    not this worker's active sessions are ignored. Returns how many were stored. Times are kept
    within the session's run and never before its previous sample (the module's docstring).

    Only the measured columns are written, so a warning or stop that ``check_idle`` commits
    meanwhile stands; a limit whose condition clears is taken off ``warned`` (under the row's lock),
    so the next idle stretch is warned of again."""
    ids = [pk for pk in samples if pk in held]
    if not ids:
        return 0
    rows = list(
        Session.objects.select_related("task", "task__compute_resource")
        .filter(task_id__in=ids, task__worker=worker, task__state__in=Task.ACTIVE_STATES)
        .order_by("task_id")
    )
    profiles, resources = idle_limit_rows(
        {s.task.compute_resource.profile_id for s in rows}, {s.task.compute_resource_id for s in rows}
    )
    for session in rows:
        sample = samples[session.task_id]
        resource = session.task.compute_resource
        limits = limits_for(resource.pk, resource.profile_id, profiles=profiles, resources=resources)
        started = session.task.started_at
        floor = max(filter(None, (started, session.sampled_at)), default=None)
        at = _within(sample["sampled_at"], floor, now)
        last_activity = sample.get("last_activity")
        if last_activity is not None:
            last_activity = _within(last_activity, started, at)
        cpu, gpu = sample.get("cpu_percent"), sample.get("gpu_util")
        net_bytes, connections = sample.get("net_bytes"), sample.get("connections")
        quiet = connections == 0 and (
            net_bytes is None or session.net_bytes is None or net_bytes == session.net_bytes
        )
        was = _stretches(session)
        session.cpu_idle_since = _since(
            cpu is not None and cpu < limits["cpu_below_pct"], session.cpu_idle_since, at
        )
        session.gpu_idle_since = _since(
            gpu is not None and gpu < limits["gpu_below_pct"], session.gpu_idle_since, at
        )
        session.net_idle_since = _since(quiet, session.net_idle_since, at)
        session.cpu_percent, session.gpu_util = cpu, gpu
        session.net_bytes, session.connections = net_bytes, connections
        session.last_activity = last_activity
        session.sampled_at = at
        if sample.get("ready") and sample.get("url"):
            session.url = sample["url"]
            session.ready_at = session.ready_at or at
        session.ready = bool(sample.get("ready"))
        session.save(update_fields=MEASURED_FIELDS)
        now_since = _stretches(session)
        cleared = {name for name, since in was.items() if since is not None and since != now_since[name]}
        if cleared:
            _forget_warnings(session.pk, cleared)
    return len(rows)


@transaction.atomic
def _forget_warnings(pk: int, cleared: set[str]) -> None:
    """The idle stretches of ``cleared`` ended: their next stretch is warned of again."""
    session = Session.objects.select_for_update(no_key=True).only("warned").filter(pk=pk).first()
    if session is not None and cleared & set(session.warned):
        session.warned = [name for name in session.warned if name not in cleared]
        session.save(update_fields=["warned"])


def _conditions(session: Session, limits: dict) -> list[tuple[str, datetime, int]]:
    """(limit, since when its condition holds, its limit in seconds) for each limit set whose
    condition holds."""
    task = session.task
    since = {
        "lifetime": task.started_at,
        "cpu": session.cpu_idle_since,
        "gpu": session.gpu_idle_since,
        "network": session.net_idle_since,
        "jupyter": session.last_activity if session.kind.type == SessionKind.Type.JUPYTER else None,
    }
    return [
        (name, since[name], limits[field])
        for name, field in LIMIT_FIELDS.items()
        if since[name] is not None and limits[field] is not None
    ]


def describe_limit(name: str, limits: dict) -> str:
    return LIMIT_WORDS[name].format(**limits)


def _notify(task: Task, message: str) -> None:
    Notification.objects.create(
        user_id=task.user_id,
        kind=Notification.Kind.SESSION_IDLE,
        link=f"/work/tasks/{task.pk}/",
        message=message,
    )


def _warn(session: Session, name: str, limits: dict, deadline: datetime) -> None:
    task = session.task
    if name == "lifetime":
        message = (
            f"Session {task} reaches its maximum lifetime at {deadline:%Y-%m-%d %H:%M:%S} UTC and will be "
            f"stopped then ({limits[LIMIT_FIELDS[name]]} s after it started); save your work."
        )
    else:
        message = (
            f"Session {task} stops at {deadline:%Y-%m-%d %H:%M:%S} UTC unless it is used: "
            f"{describe_limit(name, limits)} for {limits[LIMIT_FIELDS[name]]} s."
        )
    _notify(task, message)
    session.warned = [*session.warned, name]
    Session.objects.filter(pk=session.pk).update(warned=session.warned)


@transaction.atomic
def _stop(session: Session, name: str, limits: dict, since: datetime, now: datetime) -> bool:
    task = Task.objects.select_for_update(no_key=True).get(pk=session.task_id)
    if task.state != Task.State.RUNNING:
        return False
    limit_s = limits[LIMIT_FIELDS[name]]
    detail = {"limit": name, "limit_s": limit_s, "since": since.isoformat()}
    if name in ("cpu", "gpu"):
        detail["below_pct"] = limits[f"{name}_below_pct"]
    tasks.request_stop_many([task], Task.StopReason.IDLE, now, detail=detail)
    Session.objects.filter(pk=session.pk).update(stopped_by=name)
    _notify(
        task,
        f"Session {task} was stopped by its idle limit: {describe_limit(name, limits)} "
        f"for {limit_s} s. Its GPUs went back to the pool; start another when you need one.",
    )
    events.notify(
        Group.objects.filter(policy__compute_resources=task.compute_resource_id).first(),
        "idle_stop",
        f"Session {task} stopped by its idle limit",
        f"Session {task} of {task.user} was stopped: {describe_limit(name, limits)} for {limit_s} s. "
        "Its GPUs went back to the pool.",
        f"/work/tasks/{task.pk}/",
    )
    return True


def check_idle(now: datetime | None = None) -> dict[str, int]:
    """Warn and stop the running sessions whose idle limits are reached at ``now``."""
    now = now or timezone.now()
    running = Session.objects.filter(task__state=Task.State.RUNNING, task__kind=Task.Kind.SESSION)
    ids = list(running.order_by("pk").values_list("pk", flat=True))
    if not ids:
        return {"warned": 0, "stopped": 0}
    profiles, resources = idle_limit_rows()
    totals = {"warned": 0, "stopped": 0}
    for pk in ids:
        warned, stopped = _check_one(pk, now, profiles, resources)
        totals["warned"] += warned
        totals["stopped"] += stopped
    return totals


@transaction.atomic
def _check_one(pk: int, now: datetime, profiles: dict, resources: dict) -> tuple[int, int]:
    """One session, its row locked (a concurrent check skips it), so a warning is written once.
    The limit that fires first stops it; only when none fires are the owner warned of those due
    within SESSION_IDLE_WARNING_S."""
    session = (
        Session.objects.select_for_update(no_key=True, skip_locked=True, of=("self",))
        .select_related("task__compute_resource", "kind")
        .filter(pk=pk, task__state=Task.State.RUNNING)
        .first()
    )
    if session is None:
        return 0, 0
    warning = timedelta(seconds=settings.SESSION_IDLE_WARNING_S)
    resource = session.task.compute_resource
    limits = limits_for(resource.pk, resource.profile_id, profiles=profiles, resources=resources)
    due = sorted(
        (since + timedelta(seconds=limit_s), name, since)
        for name, since, limit_s in _conditions(session, limits)
    )
    fired = [(deadline, name, since) for deadline, name, since in due if now >= deadline]
    if fired:
        _, name, since = fired[0]
        return 0, int(_stop(session, name, limits, since, now))
    warned = 0
    for deadline, name, _ in due:
        if now >= deadline - warning and name not in session.warned:
            _warn(session, name, limits, deadline)
            warned += 1
    return warned, 0


def share(session: Session, users, *, by) -> None:
    """Set who besides its owner may open the session through the gateway (its owner only)."""
    if session.task.user_id != by.pk:
        raise ValidationError("Only the session's owner shares it.")
    others = [user for user in users if user.pk != session.task.user_id]
    session.shared_with.set(others)
    log.info(
        "session shared",
        extra={"fields": {"task": session.task_id, "with": ",".join(sorted(u.username for u in others))}},
    )
