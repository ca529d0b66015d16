"""The SDK: one typed method per endpoint of the user API (``/api/v1/``).

Every call acts as the token's user and tells the server its channel (``sdk`` by default; the CLI
says ``cli``, the MCP server ``mcp``). Refusals raise an ``ApiError`` subclass carrying the
server's message and field errors.

Retries (``retries`` times, short backoff): idempotent calls (GET, PUT, DELETE, and cancel, which
the server treats as idempotent) are repeated on connection errors and timeouts; the others (POST,
PATCH: submit, create and update a schedule) only when the connection was never made
(``ConnectError``, ``ConnectTimeout``), so nothing reached the server and nothing runs twice. A
DELETE that answers 404 on a retry after a lost reply was done by the first try: it counts as done.
"""

import dataclasses
import re
import shlex
import ssl
import time
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import httpx

from klique.client import config

FINAL_STATES = ("succeeded", "failed", "canceled")


class KliqueError(Exception):
    """Anything that went wrong talking to Klique."""


class NotLoggedIn(KliqueError):
    """No server URL or token: run ``klique login`` or set KLIQUE_URL and KLIQUE_TOKEN."""


class ConnectionFailed(KliqueError):
    """The server could not be reached (after the retries)."""


class CertificateNotTrusted(ConnectionFailed):
    """The server's TLS certificate did not verify against the CAs trusted here."""


class WaitTimeout(KliqueError):
    """``wait`` gave up before the task ended."""


class ApiError(KliqueError):
    """The server refused a request: ``status``, its ``message`` and, for 400, the field ``errors``."""

    def __init__(self, status: int, message: str, errors: dict[str, list[str]] | None = None):
        super().__init__(message)
        self.status, self.message, self.errors = status, message, errors or {}


class InvalidRequest(ApiError):
    """400: bad input; ``errors`` maps each field to the reasons."""


class AuthenticationFailed(ApiError):
    """401: no token, or a token that is unknown, revoked or expired."""


class PermissionDenied(ApiError):
    """403: the user may see this but not do it."""


class NotFound(ApiError):
    """404: it does not exist, or the user may not see it."""


class ServerError(ApiError):
    """5xx."""


class BulkUnsupported(NotFound):
    """The server has no bulk submission endpoint (an older Klique)."""


ERRORS_BY_STATUS = {400: InvalidRequest, 401: AuthenticationFailed, 403: PermissionDenied, 404: NotFound}
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "PUT", "DELETE"})
# Nothing reached the server: safe to repeat any request.
NEVER_CONNECTED = (httpx.ConnectError, httpx.ConnectTimeout)
# The request may have reached the server (or its reply was lost): safe to repeat only when
# repeating it changes nothing.
CONNECTION_LOST = (httpx.NetworkError, httpx.TimeoutException, httpx.RemoteProtocolError)


def tls_verify(ca_bundle: str | None) -> ssl.SSLContext | bool:
    """httpx's ``verify``: a context trusting ``ca_bundle`` (a PEM file of CA certificates), else
    True: the ``SSL_CERT_FILE`` or ``SSL_CERT_DIR`` of the environment, else certifi's CAs."""
    if not ca_bundle:
        return True
    try:
        return ssl.create_default_context(cafile=ca_bundle)
    except (OSError, ssl.SSLError) as error:
        raise KliqueError(f"Cannot use the CA bundle {ca_bundle}: {error}") from error


def certificate_error(error: BaseException) -> ssl.SSLCertVerificationError | None:
    """The certificate verification failure behind a connection error, if that is what it was."""
    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, ssl.SSLCertVerificationError):
            return error
        seen.add(id(error))
        error = error.__cause__ or error.__context__
    return None


def _convert(hint, value):
    if value is None:
        return None
    args = typing.get_args(hint)
    if Decimal in args or hint is Decimal:
        return Decimal(str(value))
    if datetime in args or hint is datetime:
        return datetime.fromisoformat(value)
    return value


def _build(cls, data: dict, **extra):
    """A record from the API's JSON: the fields of ``cls``, with decimals and times parsed."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    values = {name: _convert(hints[name], data.get(name)) for name in names if name in data}
    return cls(**{**values, **extra})


def as_json(record) -> Any:
    """A record (or a list of them) as plain JSON values: decimals as strings, times in ISO 8601."""
    if isinstance(record, list | tuple):
        return [as_json(r) for r in record]
    if dataclasses.is_dataclass(record):
        return {f.name: as_json(getattr(record, f.name)) for f in dataclasses.fields(record)}
    if isinstance(record, dict):
        return {k: as_json(v) for k, v in record.items()}
    if isinstance(record, Decimal):
        return str(record)
    if isinstance(record, datetime):
        return record.isoformat()
    return record


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
class SessionKind:
    id: int
    name: str
    type: str
    description: str


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
        preemptions = tuple(_build(Preemption, p) for p in data.get("preemptions", ()))
        session = _build(Session, data["session"]) if data.get("session") else None
        return _build(
            cls, {**data, "verdict": None}, verdict=verdict, preemptions=preemptions, session=session
        )


@dataclass(frozen=True)
class ComputeResource:
    id: int
    name: str
    group: str
    group_name: str
    profile: str
    gpus: Decimal
    size_from_task: bool
    time_weight: Decimal
    reservation: Decimal
    limit: Decimal
    enabled: bool
    waiting: int
    running: int

    @classmethod
    def from_api(cls, data: dict) -> "ComputeResource":
        group = data["group"]
        return _build(cls, {**data, "group": group["slug"], "group_name": group["name"]})


@dataclass(frozen=True)
class BudgetWindow:
    """One time budget window of a policy (e.g. its budget per day), on its own UTC period."""

    period: str
    period_start: datetime
    resets_at: datetime
    budget_hours: Decimal
    used_hours: Decimal
    left_hours: Decimal
    burn_rate: Decimal
    projected_run_out: datetime | None
    over_threshold: bool
    used_up: bool


@dataclass(frozen=True)
class Usage:
    """A policy of one of the user's groups: GPUs in use and its time budget in the period (the
    binding window's figures; ``windows`` has each window)."""

    policy_id: int
    group: str
    group_name: str
    reservation: Decimal
    limit: Decimal
    gpus_in_use: Decimal
    gpu_hours: Decimal
    has_budget: bool
    period: str | None
    period_start: datetime
    resets_at: datetime
    budget_hours: Decimal | None
    used_hours: Decimal
    left_hours: Decimal | None
    burn_rate: Decimal
    projected_run_out: datetime | None
    alert_threshold: int
    over_threshold: bool
    used_up: bool
    windows: tuple[BudgetWindow, ...] = ()

    @classmethod
    def from_api(cls, data: dict) -> "Usage":
        group = data["group"]
        windows = tuple(_build(BudgetWindow, w) for w in data.get("windows") or ())
        return _build(cls, {**data, "group": group["slug"], "group_name": group["name"]}, windows=windows)


@dataclass(frozen=True)
class Schedule:
    id: int
    name: str
    owner: str
    cron: str
    compute_resource: str
    command: str
    gpus: Decimal | None
    project: str | None
    checkpoint: bool
    active: bool
    stopped_reason: str
    next_run_at: datetime | None
    last_run_at: datetime | None
    created_at: datetime
    spec: dict = dataclasses.field(default_factory=dict)
    nodes: int = 1

    @classmethod
    def from_api(cls, data: dict) -> "Schedule":
        return _build(cls, data)


@dataclass(frozen=True)
class Me:
    username: str
    email: str
    roles: list[str]
    memberships: list[dict]

    @classmethod
    def from_api(cls, data: dict) -> "Me":
        return _build(cls, data)


WHATIF_FINAL_STATES = ("done", "failed")


@dataclass(frozen=True)
class WhatIfRun:
    """A what-if replay of a recorded period under IT's changes (IT admins only): its state
    (``queued``, ``running``, ``done``, ``failed``), progress 0..1 and, once done, the ``report``
    (docs/whatif.md, "The report")."""

    id: int
    title: str
    created_by: str | None
    created_at: datetime
    start: datetime
    end: datetime
    groups: list[str]
    changes: dict
    wait_threshold_s: int
    state: str
    progress: float
    tasks: int | None
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    report: dict | None = None

    @property
    def done(self) -> bool:
        """Finished, well (``done``) or not (``failed``, with the ``error``)."""
        return self.state in WHATIF_FINAL_STATES

    @classmethod
    def from_api(cls, data: dict) -> "WhatIfRun":
        return _build(cls, data)


def _instant(value: datetime | str) -> str:
    return value.isoformat() if isinstance(value, datetime) else value


def _command_text(command: str | Sequence[str]) -> str:
    return command if isinstance(command, str) else shlex.join(command)


def _bulk_item(item: dict) -> dict:
    """One task of a bulk body: a command given as words is joined as ``submit`` joins it, GPUs
    go as text (exact decimals)."""
    if not isinstance(item, dict):
        return item
    body = dict(item)
    if isinstance(body.get("command"), list | tuple):
        body["command"] = _command_text(body["command"])
    if isinstance(body.get("gpus"), Decimal | int) and not isinstance(body["gpus"], bool):
        body["gpus"] = str(body["gpus"])
    return body


def _flat_errors(body: dict, prefix: str = "") -> dict[str, list[str]]:
    """Field errors with nested fields joined by dots: a bulk submission's
    ``{"tasks": {"3": {"gpus": [...]}}}`` reads ``{"tasks.3.gpus": [...]}``."""
    errors: dict[str, list[str]] = {}
    for key, value in body.items():
        if isinstance(value, dict):
            errors.update(_flat_errors(value, f"{prefix}{key}."))
        else:
            errors[f"{prefix}{key}"] = value if isinstance(value, list) else [str(value)]
    return errors


def _error_from(response: httpx.Response) -> ApiError:
    try:
        body = response.json()
    except ValueError:
        # A page from the server or a proxy in front of it: its text, without the markup.
        text = re.sub(r"<(script|style)\b.*?</\1>|<title>.*?</title>|<[^>]*>", " ", response.text, flags=re.S)
        body = f"HTTP {response.status_code}: {' '.join(text.split())[:300] or response.reason_phrase}"
    errors: dict[str, list[str]] = {}
    if isinstance(body, dict) and set(body) != {"detail"}:
        errors = _flat_errors(body)
        message = "; ".join(f"{field}: {' '.join(map(str, reasons))}" for field, reasons in errors.items())
    elif isinstance(body, dict):
        message = str(body["detail"])
    else:
        message = str(body)
    status = response.status_code
    kind = ServerError if status >= 500 else ERRORS_BY_STATUS.get(status, ApiError)
    return kind(status, message, errors)


class Client:
    """A session with one Klique server as one user.

    ``retries`` is how many times a request is repeated, with a short backoff: an idempotent one
    (GET, PUT, DELETE, cancel) on a connection error or a timeout, any other only when the
    connection was never made. Pass ``transport`` to use another httpx transport (tests, proxies).
    ``ca_bundle`` is a CA file to check the server's certificate with (default: ``SSL_CERT_FILE``,
    else certifi's CAs); a certificate that does not verify is never retried.
    """

    def __init__(
        self,
        url: str,
        token: str,
        *,
        channel: str = "sdk",
        timeout: float = 30.0,
        retries: int = 3,
        transport: httpx.BaseTransport | None = None,
        ca_bundle: str | None = None,
    ):
        if not url or not token:
            raise NotLoggedIn("Not logged in: run `klique login`, or set KLIQUE_URL and KLIQUE_TOKEN.")
        self.url = url.rstrip("/")
        self.retries = retries
        self._http = httpx.Client(
            base_url=self.url + "/api/v1/",
            headers={
                "Authorization": f"Bearer {token}",
                "X-Klique-Channel": channel,
                "Accept": "application/json",
                "User-Agent": "klique-client",
            },
            timeout=timeout,
            transport=transport,
            verify=tls_verify(ca_bundle),
        )

    @classmethod
    def from_config(cls, **kwargs) -> "Client":
        """A client with the URL, token and CA bundle saved by ``klique login`` (or KLIQUE_URL,
        KLIQUE_TOKEN, KLIQUE_CA_BUNDLE); a ``ca_bundle`` given here wins."""
        stored = config.load()
        kwargs["ca_bundle"] = kwargs.get("ca_bundle") or stored["ca_bundle"]
        return cls(stored["url"], stored["token"], **kwargs)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _request(
        self, method: str, path: str, *, idempotent: bool | None = None, text: bool = False, **kwargs
    ) -> Any:
        """Send a request, retrying as the class says; ``idempotent`` defaults from the method.
        The answer's JSON, or with ``text`` its body as text."""
        method = method.upper()
        if idempotent is None:
            idempotent = method in IDEMPOTENT_METHODS
        retriable = CONNECTION_LOST if idempotent else NEVER_CONNECTED
        maybe_done = False  # an earlier try may have reached the server
        for attempt in range(self.retries + 1):
            try:
                response = self._http.request(method, path, **kwargs)
                break
            except httpx.TransportError as error:
                untrusted = certificate_error(error)
                if untrusted is not None:
                    raise CertificateNotTrusted(
                        f"The TLS certificate of {self.url} is not trusted "
                        f"({untrusted.verify_message or untrusted.reason}): pass --ca-bundle FILE "
                        "(or set KLIQUE_CA_BUNDLE or SSL_CERT_FILE) naming the CA that signed it."
                    ) from error
                if attempt == self.retries or not isinstance(error, retriable):
                    raise ConnectionFailed(f"Cannot reach Klique at {self.url}: {error}") from error
                maybe_done = maybe_done or not isinstance(error, NEVER_CONNECTED)
                time.sleep(min(0.25 * 2**attempt, 4))
        if method == "DELETE" and response.status_code == 404 and maybe_done:
            return None  # the first try deleted it; its reply was lost
        if response.status_code >= 400:
            raise _error_from(response)
        if text:
            return response.text
        return response.json() if response.content else None

    def _all_pages(self, path: str, params: dict | None = None) -> list[dict]:
        page = self._request("GET", path, params=params)
        rows = list(page["results"])
        while page["next"]:
            page = self._request("GET", page["next"])
            rows.extend(page["results"])
        return rows

    def me(self) -> Me:
        return Me.from_api(self._request("GET", "me/"))

    def compute_resources(
        self, *, group: str | None = None, profile: str | None = None
    ) -> list[ComputeResource]:
        """The compute resources of your groups: the ones you may submit to; ``group`` is a group
        slug, ``profile`` a profile name."""
        params = {k: v for k, v in {"group": group, "profile": profile}.items() if v is not None}
        return [ComputeResource.from_api(r) for r in self._all_pages("compute-resources/", params)]

    def compute_resource(self, resource_id: int) -> ComputeResource:
        """One compute resource you may submit to, with its waiting and running counts."""
        return ComputeResource.from_api(self._request("GET", f"compute-resources/{int(resource_id)}/"))

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
    ) -> Task:
        """Submit a task; ``gpus`` (per node) only for a profile that takes the size from the task;
        ``nodes`` (left out: 1) only where the profile's pools run multi-node work. The task counts
        GPUs x nodes against its group's reservation and limit."""
        body = {
            "compute_resource": compute_resource,
            "command": _command_text(command),
            "gpus": None if gpus is None else str(gpus),
            **({} if nodes is None else {"nodes": nodes}),
            "project": project,
            "name": name,
            "checkpoint": checkpoint,
            "spec": spec or {},
        }
        return Task.from_api(self._request("POST", "tasks/", json=body))

    def submit_many(self, items: Sequence[dict]) -> list[Task]:
        """Submit many tasks in one request, all or none (``POST tasks/bulk/``): each item is a
        task as ``POST tasks/`` takes it (``compute_resource``, ``command`` as text or a list of
        words, ``gpus``, ``nodes``, ``project``, ``name``, ``checkpoint``, ``spec``). At most the
        server's TASKS_BULK_MAX (1000 by default) per call. Returns the tasks in the items' order.
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

    def session_kinds(self) -> list[SessionKind]:
        """The session kinds IT offers (Jupyter, an IDE on a port, ...)."""
        return [_build(SessionKind, k) for k in self._request("GET", "session-kinds/")]

    def start_session(
        self,
        compute_resource: str,
        *,
        kind: str | None = None,
        gpus: Decimal | str | int | None = None,
        project: str | None = None,
        name: str = "",
    ) -> Task:
        """Start a session (a task of kind ``session``) of the session kind ``kind`` (default: the
        first Jupyter kind offered). It waits, is placed and charged like any task; once its server
        answers, ``session(id).session.open_url`` is the link with its token."""
        body = {
            "kind": "session",
            "compute_resource": compute_resource,
            "session_kind": kind,
            "gpus": None if gpus is None else str(gpus),
            "project": project,
            "name": name,
        }
        return Task.from_api(self._request("POST", "tasks/", json=body))

    def sessions(self, *, state: str | Sequence[str] | None = None, limit: int = 50) -> list[Task]:
        """Your sessions, newest first."""
        params: dict[str, Any] = {"limit": limit, "kind": "session", "mine": "true"}
        if state:
            params["state"] = [state] if isinstance(state, str) else list(state)
        page = self._request("GET", "tasks/", params=params)
        rows = list(page["results"])
        while page["next"] and len(rows) < limit:
            page = self._request("GET", page["next"])
            rows.extend(page["results"])
        return [Task.from_api(t) for t in rows[:limit]]

    def session(self, task_id: int) -> Task:
        """A session with its URL and, for its owner, its token."""
        task = self.task(task_id)
        if task.kind != "session":
            reason = f"Task {task_id} is a {task.kind} task, not a session."
            raise InvalidRequest(400, reason, {"id": [reason]})
        return task

    def stop_session(self, task_id: int) -> Task:
        """Stop a session (its owner, IT or its group's leads): its GPUs go back to the pool. A task
        that is not a session is refused (``InvalidRequest``) and left as it is."""
        self.session(task_id)
        return self.cancel(task_id)

    def usage(self) -> list[Usage]:
        """GPUs in use, GPU-hours and the time budget of each policy of your groups."""
        return [Usage.from_api(u) for u in self._request("GET", "usage/")]

    def schedules(self) -> list[Schedule]:
        return [Schedule.from_api(s) for s in self._all_pages("schedules/")]

    def schedule(self, schedule_id: int) -> Schedule:
        return Schedule.from_api(self._request("GET", f"schedules/{int(schedule_id)}/"))

    def create_schedule(
        self,
        compute_resource: str,
        command: str | Sequence[str],
        *,
        cron: str,
        name: str,
        gpus: Decimal | str | int | None = None,
        nodes: int | None = None,
        project: str | None = None,
        checkpoint: bool = False,
        spec: dict | None = None,
    ) -> Schedule:
        """A schedule submitting the task at each due time of ``cron`` (five fields, UTC); ``gpus``
        and ``nodes`` as for ``submit``."""
        body = {
            "name": name,
            "cron": cron,
            "compute_resource": compute_resource,
            "command": _command_text(command),
            "gpus": None if gpus is None else str(gpus),
            **({} if nodes is None else {"nodes": nodes}),
            "project": project,
            "checkpoint": checkpoint,
            "spec": spec or {},
        }
        return Schedule.from_api(self._request("POST", "schedules/", json=body))

    def update_schedule(self, schedule_id: int, **changes) -> Schedule:
        """Change fields of a schedule; ``active=False`` pauses it, ``active=True`` restarts it."""
        if "command" in changes:
            changes["command"] = _command_text(changes["command"])
        if changes.get("gpus") is not None:
            changes["gpus"] = str(changes["gpus"])
        return Schedule.from_api(self._request("PATCH", f"schedules/{int(schedule_id)}/", json=changes))

    def delete_schedule(self, schedule_id: int) -> None:
        """Delete a schedule; retried like a read, and a 404 after a lost reply counts as done."""
        self._request("DELETE", f"schedules/{int(schedule_id)}/")

    def whatif(
        self,
        start: datetime | str,
        end: datetime | str,
        changes: dict,
        *,
        groups: Sequence[str] | None = None,
        wait_threshold_s: int = 3600,
        title: str = "",
        wait: bool = True,
        timeout: float | None = None,
        poll: float = 2.0,
        on_progress: Callable[[WhatIfRun], None] | None = None,
    ) -> WhatIfRun:
        """Replay the recorded period [``start``, ``end``) (aware datetimes or ISO 8601 with an
        offset) as recorded and under ``changes`` (docs/whatif.md, "The changes"), for the
        ``groups`` (slugs; default the whole estate). IT admins only. The run is checked in full
        first: bad input raises ``InvalidRequest`` whose ``errors`` name the field. With ``wait``,
        polls until it is done or failed (``on_progress`` sees each new state or progress) and
        returns it with its ``report``; ``WaitTimeout`` after ``timeout`` seconds. A failed run is
        returned, not raised: see its ``state`` and ``error``."""
        body = {
            "start": _instant(start),
            "end": _instant(end),
            "groups": list(groups or []),
            "changes": changes,
            "wait_threshold_s": wait_threshold_s,
            "title": title,
        }
        run = WhatIfRun.from_api(self._request("POST", "whatif-runs/", json=body))
        if not wait:
            return run
        return self.wait_whatif(run.id, poll=poll, timeout=timeout, on_progress=on_progress)

    def whatif_run(self, run_id: int) -> WhatIfRun:
        """A what-if run with its state, progress, error and (once done) report."""
        return WhatIfRun.from_api(self._request("GET", f"whatif-runs/{int(run_id)}/"))

    def whatif_runs(self, *, limit: int = 50) -> list[WhatIfRun]:
        """The newest ``limit`` what-if runs (newest first; without their reports)."""
        page = self._request("GET", "whatif-runs/", params={"limit": min(limit, 200)})
        rows = list(page["results"])
        while page["next"] and len(rows) < limit:
            page = self._request("GET", page["next"])
            rows.extend(page["results"])
        return [WhatIfRun.from_api(r) for r in rows[:limit]]

    def wait_whatif(
        self,
        run_id: int,
        *,
        poll: float = 2.0,
        timeout: float | None = None,
        on_progress: Callable[[WhatIfRun], None] | None = None,
    ) -> WhatIfRun:
        """Poll a what-if run until it is done or failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        seen = None
        while True:
            run = self.whatif_run(run_id)
            if (run.state, run.progress) != seen and on_progress is not None:
                on_progress(run)
            seen = (run.state, run.progress)
            if run.done:
                return run
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(f"What-if run {run_id} is still {run.state} after {timeout:g} s.")
            time.sleep(poll)

    def whatif_csv(self, run_id: int) -> str:
        """A done run's comparison as CSV text (``metric,name,base,changed,difference``); a run not
        done yet raises ``ApiError`` with status 409."""
        return self._request("GET", f"whatif-runs/{int(run_id)}/csv/", text=True)
