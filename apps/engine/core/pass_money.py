"""Money budgets in a pass: a policy's money windows (`Budget.rates` set) are enforced as its time
windows are, with a task's money rate on a pool (its size x the pool's rate) in place of its time
weight. Built only when some policy has a money window (`PassState.money`, `_money_state`); each
window is its own slot: `mrem` the money units left, `mrw` the combined rate of the running work
it counts, `mrate` its rate per pool index, `mowner` its policy, `mbudget` its budget (`label` its
label), `mchain[p]` the slots of policy p and its ancestors (each policy's own longest period
first).

The start check on pool pi (`BudgetRules._money_room`): with running work counted, the money left
must last the low watermark at the combined rate with the new task, on every slot of the chain
whose rate on pi is not 0. Work on a pool at rate 0 costs nothing: it always starts and is never
stopped by a money window.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .budget import money_label, period_bounds, window_period

if TYPE_CHECKING:
    from .pass_state import PassState


def label(run: PassState, m: int) -> str:
    """Slot m's window label ("month 500.00 EUR"), worked out when a stop or a verdict names it."""
    got = run.mwindow.get(m)
    if got is None:
        b = run.mbudget[m]
        got = run.mwindow[m] = money_label(b.period, b.limit, b.currency)
    return got


def refusal(run: PassState, p: int, pi: int, size: int) -> tuple[int, int | None] | None:
    """The first slot of p's chain that refuses a start of `size` on pool pi, with the money
    needed by the start check (None: the window is used up); None when none refuses."""
    lw = run.lw
    for m in run.mchain[p]:
        rate = run.mrate[m][pi] * size
        if rate:
            r, x = run.mrem[m], run.mrw[m]
            if r <= 0:
                return m, None
            needed = lw * (x + rate)
            if x and r < needed:
                return m, needed
    return None


def money_rule(run: PassState, p: int, fi: int, size: int, used_up_only: bool) -> tuple | None:
    """The verdict rule of a money window that refuses the task on every enabled pool of its
    profile's list (the one refusing on the first of them is named): budget_used_up, or with
    `used_up_only` False also budget_start_check; None when a pool takes it."""
    first = None
    for pid in run.s.profiles[fi].pools:
        pi = run.pool_ix[pid]
        if not run.enabled[pi]:
            continue
        why = refusal(run, p, pi, size)
        if why is None or (used_up_only and why[1] is not None):
            return None
        if first is None:
            first = why
    if first is None:
        return None
    m, needed = first
    s, window = run.s, label(run, m)
    owner = s.policies[run.mowner[m]].id
    if needed is None:
        reset = period_bounds(s.now, window_period(window))[1]
        return ("budget_used_up", (), owner, run.mrem[m], None, reset, window)
    return ("budget_start_check", (), owner, run.mrem[m], needed, None, window)
