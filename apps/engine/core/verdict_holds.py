"""The starvation guard's verdicts (`pass_starvation`), read from a pass's final holds.

- starving: the task holds `pools` for itself; it starts when `needed` (its size) GPUs are free
  there (`free`: free now). Given to the holder where its rule would otherwise be
  behind_higher_priority or no_capacity.
- starvation_hold: a task whose rule would be behind_higher_priority or no_capacity and that has
  no pool of its list with room except pools held for another task: `pools` names the first such
  held pool of its list, `cause` the holder's task id.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .pass_state import PassState

ROOM_RULES = ("behind_higher_priority", "no_capacity")


def held_rule(run: PassState, c: int, size: int, rule: tuple) -> tuple:
    """The rule of the waiting tasks of one size in compute resource c other than a holder."""
    if rule[0] not in ROOM_RULES:
        return rule
    p, fi = run.cr_pol[c], run.cr_prof[c]
    held = None
    for pid in run.s.profiles[fi].pools:
        pi = run.pool_ix[pid]
        if not run.enabled[pi] or run.cap[pi] - run.occ[pi] < size or (run.closed[pi] and run.capped(pi, p)):
            continue
        if pi not in run.hold:
            return rule  # an open pool has room: another rule holds it
        if held is None:
            held = pi
    if held is None:
        return rule
    return ("starvation_hold", (run.s.pools[held].id,), None, None, None, None, run.hold[held])


def holder_rule(run: PassState, pi: int, size: int, rule: tuple) -> tuple:
    """The rule of the task that holds pool pi for itself."""
    if rule[0] not in ROOM_RULES and rule[0] != "starvation_hold":
        return rule
    free = max(0, run.cap[pi] - run.occ[pi])
    return ("starving", (run.s.pools[pi].id,), None, None, None, None, None, None, None, size, free)
