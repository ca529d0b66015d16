"""The time-budget rules of a pass: the start check (the budget left must last the low watermark
at the combined rate with the new task, on the policy and every budgeted ancestor) and the budget
stops (a used-up budget stops its subtree's running weighted work). Which window binds is worked
out with the pass's state (`PassState._binding`).
"""

from __future__ import annotations

from .pass_state import PassState


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

    def _budget_stops(self) -> None:
        """Used-up budgets stop their subtree's running weighted work, newest placed first."""
        used_up = {j for j, r in enumerate(self.rem) if r is not None and r <= 0}
        if not used_up:
            return
        stopped = [next((j for j in b if j in used_up), -1) for b in self.bchain]
        placed = self.s.placed
        for k in range(len(placed) - 1, -1, -1):
            c = self.run_cr[k]
            j = stopped[self.cr_pol[c]]
            if not self.gone[k] and j >= 0 and self.weight[self.cr_prof[c]]:
                self._preempt(k, "budget", None, self.window[j])
