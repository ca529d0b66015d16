"""Maintenance windows' verdicts (`pass_state.PassState._maintenance`), read from a pass's state.

maintenance: a waiting task whose rule would otherwise be behind_higher_priority or no_capacity
(or starvation_hold, which comes from them) while a pool of its profile's list (enabled, with a
declared capacity of at least its size) is in maintenance now, cause "in_maintenance", or refuses
it for a window ahead, cause "window_ahead" (its time limit left would cross the window's start,
or it has none and its profile does not allow that). `pools` names the first such pool of the
list, `since` and `reset_at` the window's start and end. Pools in maintenance now make it a rule
of the group (compute resource, size); a window ahead depends on each task's limit, so it is the
task's own (`VerdictBook._task_rule`, `Decisions.maintenance_verdicts`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .pass_state import PassState

MAINTENANCE, IN_MAINTENANCE, WINDOW_AHEAD = "maintenance", "in_maintenance", "window_ahead"
FROM_ROOM = ("behind_higher_priority", "no_capacity", "starvation_hold", MAINTENANCE)  # a room rule


def maintenance_rule(run: PassState, c: int, size: int, task=None) -> tuple | None:
    """The maintenance rule of compute resource c's tasks of `size` (with `task`: of that task,
    windows ahead included), or None when no pool of its list is concerned."""
    fi = run.cr_prof[c]
    pools = run.s.pools
    for pid in run.s.profiles[fi].pools:
        pi = run.pool_ix[pid]
        if not run.enabled[pi] or pools[pi].capacity < size:
            continue
        if pi in run.down:
            cause = IN_MAINTENANCE
        elif task is not None and not run.admits(pi, task, fi):
            cause = WINDOW_AHEAD
        else:
            continue
        w = run.windows[pi]
        return (MAINTENANCE, (pid,), None, None, None, w.end, cause, *(None,) * 4, (), None, w.start)
    return None
