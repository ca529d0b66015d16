"""The budget rules of a pass: the start check (the budget left must last the low watermark at the
combined rate with the new task, on the policy and every budgeted ancestor) and the budget stops (a
used-up budget stops its subtree's running weighted work). Which time window binds is worked out
with the pass's state (`PassState._binding`); money windows (`pass_money`) are each checked on the
pool a task would start on (`_money_room`), and stop only the work that costs money.
"""

from __future__ import annotations

from .pass_money import label
from .pass_state import PassState

UNBOUNDED = 2**62


class BudgetRules(PassState):
    def _budget_ok(self, p: int, w: int) -> bool:
        """The start check for one more task of weight w, on p and every budgeted ancestor."""
        if not w:
            return True
        rem, rw, lw = self.rem, self.rw, self.lw
        for j in self.bchain[p]:
            r = rem[j]
            if r <= 0:
                return False
            x = rw[j]
            if x and r < lw * (x + w):
                return False
        return True

    def _money_room(self, p: int, pi: int) -> int:
        """The largest task (milli-GPUs) that the money windows of p and its ancestors let start on
        pool pi: the money start check solved for the size (negative: none may)."""
        room = UNBOUNDED
        lw, mrem, mrw, mrate = self.lw, self.mrem, self.mrw, self.mrate
        for m in self.mchain[p]:
            rate = mrate[m][pi]
            if rate:
                r = mrem[m]
                if r <= 0:
                    return 0
                x = mrw[m]
                if x and lw:
                    most = (r - lw * x) // (lw * rate)
                    if most < room:
                        room = most
        return room

    def _budget_stops(self) -> None:
        """Used-up budgets stop their subtree's running weighted work, newest placed first; a
        used-up money window its running work on pools that cost money."""
        used_up = {j for j, r in enumerate(self.rem) if r is not None and r <= 0}
        spent = self.money and any(r <= 0 for r in self.mrem)
        if not used_up and not spent:
            return
        stopped = [next((j for j in b if j in used_up), -1) for b in self.bchain]
        placed = self.s.placed
        for k in range(len(placed) - 1, -1, -1):
            if self.gone[k]:
                continue
            c = self.run_cr[k]
            j = stopped[self.cr_pol[c]]
            if j >= 0 and self.weight[self.cr_prof[c]]:
                self._preempt(k, "budget", None, self.window[j])
            elif spent and self.run_size[k]:
                pi = self.run_pool[k]
                m = next(
                    (m for m in self.mchain[self.cr_pol[c]] if self.mrem[m] <= 0 and self.mrate[m][pi]), -1
                )
                if m >= 0:
                    self._preempt(k, "budget", None, label(self, m))
