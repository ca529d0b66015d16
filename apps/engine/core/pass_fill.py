"""The fill and lend phases of a pass: work goes onto pools up to its policy's reservation (fill)
or up to its limit (lend), never above an ancestor's limit, in the pass's visiting order; a task
that does not fit does not block smaller ones behind it, and a pool that a reached spend cap closes
to a policy takes none of its work.
"""

from __future__ import annotations

from .pass_budgets import BudgetRules
from .pass_state import LEND


class FillPhase(BudgetRules):
    def _lend_room(self, p: int) -> int:
        """What policy p may borrow now under the lending limits: the free GPUs of the estate less
        the idle reservations that other policies keep from being lent (`lendable`). Reservations
        are estate-wide, so the kept GPUs are counted over every enabled pool. A policy keeps
        max(0, idle reservation - lendable); a kept amount nested in a keeping ancestor's counts
        once (the larger of the ancestor's own and its keeping descendants' sum). Policy p's own
        chain keeps nothing from p: the group's own arrivals are what is kept for."""
        free = self.free_gpus()
        U, res, lendable, mine = self.U, self.res, self.lendable, set(self.chain[p])
        kept: dict[int, int] = {}
        for q in self.keeps:
            if q not in mine:
                kept[q] = max(0, res[q] - U[q] - lendable[q])
        total = 0
        for q, own in kept.items():
            inner = sum(v for d, v in kept.items() if d != q and q in self.anc[d])
            if not any(a in kept for a in self.anc[q]):
                total += max(own, inner)
        return max(0, free - total)

    def _active(self, fi: int) -> list[int]:
        """The profile's compute resources with waiting work, in its queuing order."""
        got = self.active.get(fi)
        if got is None:
            order = {pid: j for j, pid in enumerate(self.s.profiles[fi].policies)}
            policies = self.s.policies
            keyed = [(order.get(policies[self.cr_pol[c]].id), c) for c in self.waiting_by_profile[fi]]
            got = self.active[fi] = [c for j, c in sorted(k for k in keyed if k[0] is not None)]
        return got

    def _candidates(self, phase: str, fi: int, memo: dict, top: list[int] | None = None) -> list[int]:
        """The profile's active resources whose policy may take a task in this phase (under `top`,
        its policies' ceilings: by default their limits when lending, else their reservations)."""
        got = memo.get(fi)
        if got is None:
            U, ms, w = self.U, self.min_size[fi], self.weight[fi]
            if top is None:
                top = self.lim if phase == LEND else self.res
            got = memo[fi] = [
                c
                for c in self._active(fi)
                if top[self.cr_pol[c]] - U[self.cr_pol[c]] >= ms and self._budget_ok(self.cr_pol[c], w)
            ]
        return got

    def _fill_or_lend(self, phase: str, fair: bool = False) -> None:
        """One fill or lend over the pass's visits. `fair`: a lend in which each child of a fair
        parent takes at most its reservation plus its fair share (`pass_fair`)."""
        cap, occ, U, res, anc = self.cap, self.occ, self.U, self.res, self.anc
        lim = self.fair_top if fair else self.lim
        top = lim if phase == LEND else res
        keeps, hold = phase == LEND and bool(self.keeps), self.hold
        money = self.money
        memo: dict[int, list[int]] = {}
        for pi, fi in self.steps:
            ms, w = self.min_size[fi], self.weight[fi]
            if cap[pi] - occ[pi] < ms:
                continue
            shut = self.closed[pi]
            for c in self._candidates(phase, fi, memo, top):
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
                        h = lim[a] - U[a]
                        if h < b:
                            b = h
                    if keeps:
                        b = min(b, max(res[p] - U[p], 0) + self._lend_room(p))
                    if money:
                        b = min(b, self._money_room(p, pi))
                    if b < ms or not self._budget_ok(p, w):
                        break
                    if q is None:
                        q = self._queue(c)
                    i = q.peek(b, pi)
                    if i < 0:
                        break
                    task = q.tasks[i]
                    if hold and hold.get(pi, task.id) != task.id:
                        break
                    self._place(c, q, i, task, pi, phase)
                    room = cap[pi] - occ[pi]
