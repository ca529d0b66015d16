"""What-if runs in the SDK (IT admins): replay a recorded period under changed rules, follow the
run and fetch its report or its CSV (docs/whatif.md)."""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from klique.client.sdk.errors import WaitTimeout
from klique.client.sdk.records import build

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
        return build(cls, data)


def _instant(value: datetime | str) -> str:
    return value.isoformat() if isinstance(value, datetime) else value


class WhatIfApi:
    """The what-if endpoints of ``Client`` (``whatif-runs/``)."""

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
