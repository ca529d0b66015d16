"""Sessions in the SDK: the session kinds IT offers, and starting, listing, reading and stopping
sessions (tasks of kind ``session``; their session side is ``Task.session``)."""

from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from klique.client.sdk.errors import InvalidRequest
from klique.client.sdk.records import build
from klique.client.sdk.tasks import Task


@dataclass(frozen=True)
class SessionKind:
    id: int
    name: str
    type: str
    description: str


class SessionsApi:
    """The session endpoints of ``Client`` (``session-kinds/`` and the session tasks of
    ``tasks/``); ``stop_session`` cancels through ``TasksApi.cancel``."""

    def session_kinds(self) -> list[SessionKind]:
        """The session kinds IT offers (Jupyter, an IDE on a port, ...)."""
        return [build(SessionKind, k) for k in self._request("GET", "session-kinds/")]

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

    def session_shared_with(self, task_id: int) -> list[str]:
        """Who besides its owner may open a session through the session gateway (owner only)."""
        return self._request("GET", f"sessions/{task_id}/sharing/")["users"]

    def share_session(self, task_id: int, users: list[str]) -> list[str]:
        """Let these people (usernames) open your session through the session gateway; an empty
        list shares it with no one. The list as it now stands."""
        return self._request("PUT", f"sessions/{task_id}/sharing/", json={"users": list(users)})["users"]
