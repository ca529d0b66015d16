"""Reads for sessions: the session token, the block a worker gets with a claimed session, the
idle limits that apply to a compute resource and what its owner sees of a session."""

import base64
import hashlib
import hmac

from django.conf import settings

from apps.sessions.models import DEFAULT_BELOW_PCT, IdleLimits, ProfileIdleLimits, ResourceIdleLimits, Session
from apps.tasks.models import Task
from apps.tasks.selectors import visible_tasks


def session_token(task_id: int) -> str:
    """The session's secret, derived from SECRET_KEY and the task id (HMAC-SHA256), so it is never
    stored: the daemon gets it with the claim, the owner from the API or the portal."""
    digest = hmac.new(settings.SECRET_KEY.encode(), f"klique-session:{task_id}".encode(), hashlib.sha256)
    return "kqs_" + base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")


def base_url(task_id: int) -> str:
    return f"/sessions/{task_id}/"


def claim_blocks(tasks) -> dict[int, dict]:
    """What a worker needs to run each claimed session (the contract of docs/sessions.md), by task
    id, in one query; a batch task, or a session task whose session row is gone, has none."""
    ids = [task.pk for task in tasks if task.kind == Task.Kind.SESSION]
    if not ids:
        return {}
    blocks = {}
    for session in Session.objects.select_related("kind").filter(task_id__in=ids):
        kind = session.kind
        block = {
            "kind": kind.type,
            "token": session_token(session.task_id),
            "base_url": base_url(session.task_id),
            "ready_path": kind.readiness_path,
            "sample_s": settings.SESSION_SAMPLE_S,
        }
        if kind.type == kind.Type.PORT:
            block["command"] = list(kind.command)
        if kind.strip_base_url:
            block["strip_base_url"] = True
        blocks[session.task_id] = block
    return blocks


def sessions_of(tasks) -> dict[int, Session]:
    """The session rows of the tasks of kind ``session`` among ``tasks``, by task id (one query)."""
    ids = [task.pk for task in tasks if task.kind == Task.Kind.SESSION]
    if not ids:
        return {}
    return {s.task_id: s for s in Session.objects.select_related("kind", "task").filter(task_id__in=ids)}


def idle_limit_rows(profile_ids=None, resource_ids=None) -> tuple[dict, dict]:
    """The idle limit rows by profile id and by compute resource id (all of them when no ids are
    given), for ``limits_for`` to resolve many sessions in two queries."""
    profiles, resources = ProfileIdleLimits.objects.all(), ResourceIdleLimits.objects.all()
    if profile_ids is not None:
        profiles = profiles.filter(profile_id__in=profile_ids)
    if resource_ids is not None:
        resources = resources.filter(compute_resource_id__in=resource_ids)
    return (
        {row.profile_id: row for row in profiles},
        {row.compute_resource_id: row for row in resources},
    )


def limits_for(compute_resource_id: int, profile_id: int, *, profiles=None, resources=None) -> dict:
    """The idle limits of sessions on a compute resource: each field the resource's own, else its
    profile's; a limit left empty on both is off, a threshold left empty is 5 %. ``profiles`` and
    ``resources`` (rows by profile and resource id) spare the queries when many are resolved."""
    if profiles is None:
        profiles = {row.profile_id: row for row in ProfileIdleLimits.objects.filter(profile_id=profile_id)}
    if resources is None:
        rows = ResourceIdleLimits.objects.filter(compute_resource_id=compute_resource_id)
        resources = {row.compute_resource_id: row for row in rows}
    own, profile = resources.get(compute_resource_id), profiles.get(profile_id)
    limits = {}
    for name in (*IdleLimits.LIMITS, *IdleLimits.THRESHOLDS):
        value = getattr(own, name, None)
        limits[name] = getattr(profile, name, None) if value is None else value
    for name in IdleLimits.THRESHOLDS:
        limits[name] = DEFAULT_BELOW_PCT if limits[name] is None else limits[name]
    return limits


def tunnel_url() -> str:
    """Where workers open their session tunnel; empty when no gateway is set."""
    if settings.SESSION_TUNNEL_URL or not settings.SESSION_GATEWAY_URL:
        return settings.SESSION_TUNNEL_URL
    return "ws" + settings.SESSION_GATEWAY_URL.removeprefix("http") + "/tunnel/"


def public_url(session: Session) -> str:
    """Where people open it, once its worker says it answers: through the session gateway when one
    is set, else at that address."""
    if settings.SESSION_GATEWAY_URL and session.url:
        return settings.SESSION_GATEWAY_URL + base_url(session.task_id)
    return session.url


def open_url(session: Session) -> str:
    """The link its owner opens: through the gateway, the kind's page (the portal login is the
    credential); straight to the worker, the reported URL with the token (Jupyter reads ``?token=``)."""
    if not session.ready or not session.url:
        return ""
    if settings.SESSION_GATEWAY_URL:
        page = session.kind.open_path.replace("{base_path}", base_url(session.task_id).lstrip("/"))
        return public_url(session) + page
    return f"{session.url}?token={session_token(session.task_id)}"


def may_open(user, session: Session) -> bool:
    """Its owner, and those its owner shares it with, open it; no one else (IT included)."""
    return session.task.user_id == user.pk or session.shared_with.filter(pk=user.pk).exists()


def gateway_access(user, task_id: int) -> tuple[int, dict]:
    """The session gateway's question: may ``user`` open session ``task_id`` now, and on which
    worker does it run. 404 when the user may not see it, 403 when they may see but not open it,
    409 when it does not run (yet or any more)."""
    session = Session.objects.select_related("task", "kind").filter(task_id=task_id).first()
    opens = session is not None and may_open(user, session)
    if not opens:
        if session is None or not visible_tasks(user).filter(pk=task_id).exists():
            return 404, {"detail": "No such session."}
        return 403, {"detail": "Only its owner and those it is shared with open a session."}
    task = session.task
    if task.state != Task.State.RUNNING or task.worker_id is None:
        return 409, {"detail": f"The session is not running (it is {task.get_state_display().lower()})."}
    return 200, {"session": task_id, "worker": task.worker_id, "kind": session.kind.type}


def session_view(session: Session | None, user) -> dict | None:
    """A session as people see it; the token and the link with it only for its owner."""
    if session is None:
        return None
    mine = session.task.user_id == user.pk
    return {
        "kind": session.kind.name,
        "type": session.kind.type,
        "ready": session.ready,
        "url": public_url(session) or None,
        "token": session_token(session.task_id) if mine else None,
        "open_url": (open_url(session) or None) if mine else None,
        "cpu_percent": session.cpu_percent,
        "gpu_util": session.gpu_util,
        "net_bytes": session.net_bytes,
        "connections": session.connections,
        "last_activity": session.last_activity,
        "sampled_at": session.sampled_at,
        "stopped_by": session.stopped_by or None,
    }


def my_sessions(user):
    return (
        Session.objects.select_related("task__compute_resource", "kind", "task__user")
        .prefetch_related("shared_with")
        .filter(task__user=user)
        .order_by("-task_id")
    )


def shared_with_me(user):
    """The running sessions others share with ``user``, newest first."""
    return (
        Session.objects.select_related("task__compute_resource", "kind", "task__user")
        .filter(shared_with=user, task__state=Task.State.RUNNING)
        .order_by("-task_id")
    )


def owned_session(user, task_id: int) -> Session | None:
    """The session ``task_id`` when ``user`` owns it."""
    return Session.objects.select_related("task").filter(task_id=task_id, task__user=user).first()
