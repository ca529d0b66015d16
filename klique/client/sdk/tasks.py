"""Tasks in the SDK: the ``Task`` record (with its verdict, preemptions and, for a session, its
session side) and the task endpoints: submit, submit many, list, read, cancel and wait."""

import dataclasses
import shlex
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from klique.client.sdk.errors import BulkUnsupported, NotFound, WaitTimeout
from klique.client.sdk.records import build

FINAL_STATES = ("succeeded", "failed", "canceled", "timed_out")


@dataclass(frozen=True)
class Verdict:
    """Why a task waits, from the engine's last pass."""

    rule: str
    message: str
    details: dict


@dataclass(frozen=True)
class Preemption:
    at: datetime
    kind: str
    reason: str
    pool: str | None


@dataclass(frozen=True)
class FairShare:
    """Where the parent of a task's group lends fairly: the GPUs the group borrows above its
    reservation and its fair share of them."""

    parent: str
    borrowed: Decimal
    share: Decimal


@dataclass(frozen=True)
class Session:
    """A session's side of a task of kind ``session``: where it answers once ready, and its token
    (only for its owner). ``open_url`` is the URL with the token."""

    kind: str
    type: str
    ready: bool
    url: str | None
    token: str | None
    open_url: str | None
    cpu_percent: float | None = None
    gpu_util: float | None = None
    net_bytes: int | None = None
    connections: int | None = None
    last_activity: datetime | None = None
    sampled_at: datetime | None = None
    stopped_by: str | None = None


@dataclass(frozen=True)
class Link:
    """A dependency seen from one end: the other task, the link's kind (after_ok, after_any) and
    the other task's state."""

    task: int
    kind: str
    state: str


@dataclass(frozen=True)
class Task:
    id: int
    name: str
    user: str
    compute_resource: str
    group: str
    profile: str
    project: str | None
    gpus: Decimal
    command: str
    channel: str
    state: str
    pool: str | None
    queue_position: int | None
    verdict: Verdict | None
    checkpoint: bool
    preemption_count: int
    last_preemption_reason: str
    stop_reason: str
    exit_code: int | None
    submitted_at: datetime
    placed_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    preemptions: tuple[Preemption, ...] = ()
    spec: dict = dataclasses.field(default_factory=dict)
    failure: str = ""
    nodes: int = 1
    kind: str = "batch"
    session: Session | None = None
    priority: int = 0
    priority_class: str | None = None
    fair_share: FairShare | None = None
    time_limit_s: int | None = None
    ran_s: int = 0
    time_left_s: int | None = None
    after_ok: tuple[int, ...] = ()
    after_any: tuple[int, ...] = ()
    dependencies: tuple[Link, ...] = ()
    dependants: tuple[Link, ...] = ()
    array: int | None = None
    array_index: int | None = None

    @property
    def counted_gpus(self) -> Decimal:
        """What the task counts against reservation, limit and capacity: GPUs per node x nodes."""
        return self.gpus * self.nodes

    @property
    def done(self) -> bool:
        return self.state in FINAL_STATES

    @classmethod
    def from_api(cls, data: dict) -> "Task":
        raw = data.get("verdict") or {}
        verdict = None
        if raw:
            details = {k: v for k, v in raw.items() if k not in ("rule", "message")}
            verdict = Verdict(raw.get("rule", ""), raw.get("message", ""), details)
        preemptions = tuple(build(Preemption, p) for p in data.get("preemptions", ()))
        session = build(Session, data["session"]) if data.get("session") else None
        fair = build(FairShare, data["fair_share"]) if data.get("fair_share") else None
        return build(
            cls,
            {**data, "verdict": None},
            verdict=verdict,
            preemptions=preemptions,
            session=session,
            fair_share=fair,
            after_ok=tuple(data.get("after_ok") or ()),
            after_any=tuple(data.get("after_any") or ()),
            dependencies=tuple(build(Link, link) for link in data.get("dependencies") or ()),
            dependants=tuple(build(Link, link) for link in data.get("dependants") or ()),
        )


def command_text(command: str | Sequence[str]) -> str:
    """A command as the API takes it: text as given, a list of words joined as a shell would."""
    return command if isinstance(command, str) else shlex.join(command)


def seconds(value: int | timedelta | None) -> int | None:
    """A time limit as the API takes it: whole seconds (a ``timedelta`` is turned into them)."""
    if isinstance(value, timedelta):
        return int(value.total_seconds())
    return value


def _bulk_item(item: dict) -> dict:
    """One task of a bulk body: a command given as words is joined as ``submit`` joins it, GPUs
    go as text (exact decimals), a time limit as whole seconds, dependencies as lists."""
    if not isinstance(item, dict):
        return item
    body = dict(item)
    if isinstance(body.get("command"), list | tuple):
        body["command"] = command_text(body["command"])
    if isinstance(body.get("gpus"), Decimal | int) and not isinstance(body["gpus"], bool):
        body["gpus"] = str(body["gpus"])
    if isinstance(body.get("time_limit_s"), timedelta):
        body["time_limit_s"] = seconds(body["time_limit_s"])
    for kind in ("after_ok", "after_any"):
        if isinstance(body.get(kind), tuple):
            body[kind] = list(body[kind])
    return body


def task_body(
    compute_resource: str,
    command: str | Sequence[str],
    *,
    gpus: Decimal | str | int | None = None,
    nodes: int | None = None,
    project: str | None = None,
    name: str = "",
    checkpoint: bool = False,
    spec: dict | None = None,
    priority: int | str | None = None,
    time_limit_s: int | timedelta | None = None,
    after_ok: Sequence[int] | None = None,
    after_any: Sequence[int] | None = None,
) -> dict:
    """A task as ``POST tasks/`` takes it; fields left out are the server's defaults."""
    return {
        "compute_resource": compute_resource,
        "command": command_text(command),
        "gpus": None if gpus is None else str(gpus),
        **({} if nodes is None else {"nodes": nodes}),
        "project": project,
        "name": name,
        "checkpoint": checkpoint,
        "spec": spec or {},
        **({} if priority is None else {"priority": priority}),
        **({} if time_limit_s is None else {"time_limit_s": seconds(time_limit_s)}),
        **({} if not after_ok else {"after_ok": list(after_ok)}),
        **({} if not after_any else {"after_any": list(after_any)}),
    }


class TasksApi:
    """The task endpoints of ``Client`` (``tasks/``)."""

    def submit(
        self,
        compute_resource: str,
        command: str | Sequence[str],
        *,
        gpus: Decimal | str | int | None = None,
        nodes: int | None = None,
        project: str | None = None,
        name: str = "",
        checkpoint: bool = False,
        spec: dict | None = None,
        priority: int | str | None = None,
        time_limit_s: int | timedelta | None = None,
        after_ok: Sequence[int] | None = None,
        after_any: Sequence[int] | None = None,
    ) -> Task:
        """Submit a task; ``gpus`` (per node) only for a profile that takes the size from the task;
        ``nodes`` (left out: 1) only where the profile's pools run multi-node work. The task counts
        GPUs x nodes against its group's reservation and limit. ``priority``: a whole number or a
        priority class's name (left out: the compute resource's default; at most its maximum).
        ``time_limit_s``: running seconds (or a ``timedelta``) after which it ends timed_out (left
        out: the compute resource's default; at most its maximum). ``after_ok`` / ``after_any``:
        ids of your tasks it runs after (``after_ok``: only if they succeed, else it is canceled)."""
        body = task_body(
            compute_resource,
            command,
            gpus=gpus,
            nodes=nodes,
            project=project,
            name=name,
            checkpoint=checkpoint,
            spec=spec,
            priority=priority,
            time_limit_s=time_limit_s,
            after_ok=after_ok,
            after_any=after_any,
        )
        return Task.from_api(self._request("POST", "tasks/", json=body))

    def submit_many(self, items: Sequence[dict]) -> list[Task]:
        """Submit many tasks in one request, all or none (``POST tasks/bulk/``): each item is a
        task as ``POST tasks/`` takes it (``compute_resource``, ``command`` as text or a list of
        words, ``gpus``, ``nodes``, ``project``, ``name``, ``checkpoint``, ``spec``, ``priority``,
        ``time_limit_s``, ``after_ok`` and ``after_any``, where ``{"item": n}`` names an earlier item).
        At most the server's TASKS_BULK_MAX (1000 by default) per call. Returns the tasks in the items' order.
        A refused item raises ``InvalidRequest`` whose ``errors`` name the item's index and field,
        ``{"tasks.3.gpus": [...]}``; nothing was created. A server without
        the bulk endpoint raises ``BulkUnsupported`` (no fallback to one submit per task)."""
        body = {"tasks": [_bulk_item(item) for item in items]}
        try:
            created = self._request("POST", "tasks/bulk/", json=body)
        except NotFound as error:
            raise BulkUnsupported(
                404,
                f"The server at {self.url} has no bulk submission (POST /api/v1/tasks/bulk/): "
                "upgrade it, or submit the tasks one by one.",
            ) from error
        return [Task.from_api(t) for t in created]

    def tasks(
        self,
        *,
        state: str | Sequence[str] | None = None,
        mine: bool = False,
        compute_resource: str | None = None,
        group: str | None = None,
        user: str | None = None,
        project: str | None = None,
        channel: str | None = None,
        submitted_after: datetime | str | None = None,
        submitted_before: datetime | str | None = None,
        limit: int = 50,
    ) -> list[Task]:
        """The newest ``limit`` tasks you may see (newest first), narrowed by the filters: ``state``
        (one or several), only yours (``mine``), a compute resource name, a group slug, a
        submitter's username, a project name, a channel, submitted at or after
        ``submitted_after`` and before ``submitted_before`` (aware datetimes or ISO 8601)."""
        params: dict[str, Any] = {"limit": limit}
        if state:
            params["state"] = [state] if isinstance(state, str) else list(state)
        if mine:
            params["mine"] = "true"
        filters = {
            "compute_resource": compute_resource,
            "group": group,
            "user": user,
            "project": project,
            "channel": channel,
            "submitted_after": submitted_after,
            "submitted_before": submitted_before,
        }
        for name, value in filters.items():
            if value is not None:
                params[name] = value.isoformat() if isinstance(value, datetime) else value
        page = self._request("GET", "tasks/", params=params)
        rows = list(page["results"])
        while page["next"] and len(rows) < limit:  # the server serves at most 200 a page
            page = self._request("GET", page["next"])
            rows.extend(page["results"])
        return [Task.from_api(t) for t in rows[:limit]]

    def task(self, task_id: int) -> Task:
        """A task with its place in line, the engine's verdict and its preemption history."""
        return Task.from_api(self._request("GET", f"tasks/{int(task_id)}/"))

    def cancel(self, task_id: int) -> Task:
        """Cancel a task. Idempotent on the server (a second cancel changes nothing), so retried
        like a read."""
        return Task.from_api(self._request("POST", f"tasks/{int(task_id)}/cancel/", idempotent=True))

    def report_checkpoint(self, task_id: int, at: datetime | None = None) -> datetime:
        """Say that a running task's work checkpointed (at ``at``, aware; default now by the
        server's clock): a preemption then loses only the work since. Idempotent on the server (an
        older checkpoint changes nothing), so retried like a read. The recorded checkpoint time."""
        body = {} if at is None else {"at": at.isoformat()}
        answer = self._request("POST", f"tasks/{int(task_id)}/checkpoint/", idempotent=True, json=body)
        return datetime.fromisoformat(answer["at"].replace("Z", "+00:00"))

    def wait(
        self,
        task_id: int,
        *,
        poll: float = 2.0,
        timeout: float | None = None,
        on_change: Callable[[Task], None] | None = None,
    ) -> Task:
        """Poll until the task ends; ``on_change`` sees each new state, place in line or verdict."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = None
        while True:
            task = self.task(task_id)
            view = (task.state, task.pool, task.queue_position, task.verdict, task.preemption_count)
            if view != seen and on_change is not None:
                on_change(task)
            seen = view
            if task.done:
                return task
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"Task {task_id} is still {task.state} after {timeout:g} s.")
            time.sleep(poll)
