"""The fill and lend phases of a pass: work goes onto pools up to its policy's reservation (fill)
or up to its limit (lend), never above an ancestor's limit, in the pass's visiting order; a task
that does not fit does not block smaller ones behind it, and a pool that a reached spend cap closes
to a policy takes none of its work.
"""

from __future__ import annotations

from .pass_budgets import BudgetRules
from .pass_state import LEND


class FillPhase(BudgetRules):
    def _active(self, fi: int) -> list[int]:
        """The profile's compute resources with waiting work, in its queuing order."""
        got = self.active.get(fi)
        if got is None:
            order = {pid: j for j, pid in enumerate(self.s.profiles[fi].policies)}
            policies = self.s.policies
            keyed = [(order.get(policies[self.cr_pol[c]].id), c) for c in self.waiting_by_profile[fi]]
            got = self.active[fi] = [c for j, c in sorted(k for k in keyed if k[0] is not None)]
        return got

    def _candidates(self, phase: str, fi: int, memo: dict[int, list[int]]) -> list[int]:
        """The profile's active resources whose policy may take a task in this phase."""
        got = memo.get(fi)
        if got is None:
            U, ms, w = self.U, self.min_size[fi], self.weight[fi]
            top = self.lim if phase == LEND else self.res
            got = memo[fi] = [
                c
                for c in self._active(fi)
                if top[self.cr_pol[c]] - U[self.cr_pol[c]] >= ms and self._budget_ok(self.cr_pol[c], w)
            ]
        return got

    def _fill_or_lend(self, phase: str) -> None:
        cap, occ, U, res, anc = self.cap, self.occ, self.U, self.res, self.anc
        top = self.lim if phase == LEND else res
        memo: dict[int, list[int]] = {}
        for pi, fi in self.steps:
            ms, w = self.min_size[fi], self.weight[fi]
            if cap[pi] - occ[pi] < ms:
                continue
            shut = self.closed[pi]
            for c in self._candidates(phase, fi, memo):
                room = cap[pi] - occ[pi]
                if room < ms:
                    break
                p = self.cr_pol[c]
                if shut and self.capped(pi, p):
                    continue
                q = None
                while True:
                    b = min(top[p] - U[p], room)
                    for a in anc[p]:
                        h = self.lim[a] - U[a]
                        if h < b:
                            b = h
                    if b < ms or not self._budget_ok(p, w):
                        break
                    if q is None:
                        q = self._queue(c)
                    i = q.peek(b)
                    if i < 0:
                        break
                    task = q.tasks[i]
                    self._place(c, q, i, task, pi, phase)
                    room = cap[pi] - occ[pi]
