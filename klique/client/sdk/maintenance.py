"""Maintenance windows in the SDK: everyone reads the windows not over (to plan work around them);
IT schedules, moves and ends them (docs/governance.md, "Maintenance windows")."""

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from klique.client.sdk.records import build


def instant(value: datetime | timedelta | str) -> str:
    """A moment as the API takes it, ISO 8601 with its zone: a ``timedelta`` counts from now, a
    ``datetime`` without a zone is taken as UTC, text goes as given (the server checks it)."""
    if isinstance(value, timedelta):
        value = datetime.now(UTC) + value
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return value


@dataclass(frozen=True)
class MaintenanceWindow:
    """A pool's maintenance window: from ``starts_at`` to ``ends_at`` its capacity is 0. ``end`` is
    when it ends (``ended_at`` when IT ended it early); ``in_force`` while it holds the pool."""

    id: int
    pool: str
    starts_at: datetime
    ends_at: datetime
    end: datetime
    note: str
    ended_at: datetime | None
    in_force: bool

    @classmethod
    def from_api(cls, data: dict) -> "MaintenanceWindow":
        return build(cls, data)


class MaintenanceApi:
    """The maintenance endpoints of ``Client`` (``maintenance/``)."""

    def maintenance(self, *, history: bool = False) -> list[MaintenanceWindow]:
        """The windows not over, in start order; ``history``: every window, ended ones too."""
        params = {"all": "1"} if history else None
        return [MaintenanceWindow.from_api(w) for w in self._all_pages("maintenance/", params)]

    def schedule_maintenance(
        self,
        pool: str,
        starts_at: datetime | timedelta | str,
        ends_at: datetime | timedelta | str,
        note: str = "",
    ) -> MaintenanceWindow:
        """A window on ``pool`` (its name); IT admins only (``PermissionDenied`` otherwise). A window
        overlapping another of the pool, or ending before it starts or in the past, raises
        ``InvalidRequest`` naming the field."""
        body = {"pool": pool, "starts_at": instant(starts_at), "ends_at": instant(ends_at), "note": note}
        return MaintenanceWindow.from_api(self._request("POST", "maintenance/", json=body))

    def change_maintenance(
        self,
        window_id: int,
        *,
        starts_at: datetime | timedelta | str | None = None,
        ends_at: datetime | timedelta | str | None = None,
        note: str | None = None,
    ) -> MaintenanceWindow:
        """Move a window not over, or change its note (IT admins)."""
        body = {
            **({} if starts_at is None else {"starts_at": instant(starts_at)}),
            **({} if ends_at is None else {"ends_at": instant(ends_at)}),
            **({} if note is None else {"note": note}),
        }
        return MaintenanceWindow.from_api(self._request("PATCH", f"maintenance/{int(window_id)}/", json=body))

    def end_maintenance(self, window_id: int) -> MaintenanceWindow:
        """End a window now (before its start: call it off); the pool takes work at the next pass."""
        return MaintenanceWindow.from_api(self._request("POST", f"maintenance/{int(window_id)}/end/"))
