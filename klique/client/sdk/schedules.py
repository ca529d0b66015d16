"""Schedules in the SDK: cron schedules that submit a task as the user at each due time."""

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from klique.client.sdk.records import build
from klique.client.sdk.tasks import command_text, seconds


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
    priority: int | str | None = None
    time_limit_s: int | None = None

    @classmethod
    def from_api(cls, data: dict) -> "Schedule":
        return build(cls, data)


class SchedulesApi:
    """The schedule endpoints of ``Client`` (``schedules/``)."""

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
        priority: int | str | None = None,
        time_limit_s: int | timedelta | None = None,
    ) -> Schedule:
        """A schedule submitting the task at each due time of ``cron`` (five fields, UTC); ``gpus``,
        ``nodes``, ``priority`` and ``time_limit_s`` as for ``submit`` (the priority and the
        default time limit are resolved at each due time)."""
        body = {
            "name": name,
            "cron": cron,
            "compute_resource": compute_resource,
            "command": command_text(command),
            "gpus": None if gpus is None else str(gpus),
            **({} if nodes is None else {"nodes": nodes}),
            "project": project,
            "checkpoint": checkpoint,
            "spec": spec or {},
            **({} if priority is None else {"priority": priority}),
            **({} if time_limit_s is None else {"time_limit_s": seconds(time_limit_s)}),
        }
        return Schedule.from_api(self._request("POST", "schedules/", json=body))

    def update_schedule(self, schedule_id: int, **changes) -> Schedule:
        """Change fields of a schedule; ``active=False`` pauses it, ``active=True`` restarts it."""
        if "command" in changes:
            changes["command"] = command_text(changes["command"])
        if changes.get("gpus") is not None:
            changes["gpus"] = str(changes["gpus"])
        if "time_limit_s" in changes:
            changes["time_limit_s"] = seconds(changes["time_limit_s"])
        return Schedule.from_api(self._request("PATCH", f"schedules/{int(schedule_id)}/", json=changes))

    def delete_schedule(self, schedule_id: int) -> None:
        """Delete a schedule; retried like a read, and a 404 after a lost reply counts as done."""
        self._request("DELETE", f"schedules/{int(schedule_id)}/")
