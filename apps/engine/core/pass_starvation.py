"""The starvation guard: a queue head that has waited its profile's `starvation_s` for free GPUs
holds one pool against new starts of other work (`hold`).

Once per pass, after the budget stops: for each compute resource with waiting work whose profile
sets `starvation_s`, the head of its queue (first in queue order, with no stopping work of its
resource ahead of it) that has waited at least that long (`now - since`), that its policy's and
ancestors' limits and budgets allow, but that no enabled pool of its list open to it has room for,
holds the pool of its list (open to it, large enough for it, not yet held) with the most free GPUs,
ties in list order. Older heads (since, then seq, then resource order) choose first. On a held
pool fill, fair reclaim, priority and lend start only the holder; reclaim, which restores
reservations, is not held back. A hold ends when its holder is placed. A task that its array's cap
holds (`Snapshot.arrays`) is not a head: the first task behind it that is not is. A pool in
maintenance, or whose window ahead refuses the head, is not open to it. See docs/engine.md.
"""

from __future__ import annotations

from .pass_budgets import BudgetRules


class StarvationGuard(BudgetRules):
    def _hold_starving(self) -> None:
        s = self.s
        guarded = [f.starvation_s for f in s.profiles]
        if all(g is None for g in guarded):
            return
        heads = []
        for fi, wait_s in enumerate(guarded):
            if wait_s is None:
                continue
            for c in self.waiting_by_profile[fi]:
                t = self._head(c)
                if t is not None and t.since is not None and (s.now - t.since).total_seconds() >= wait_s:
                    heads.append((t.since, t.seq, c, t))
        heads.sort(key=lambda h: h[:3])
        cap, occ, U, lim, enabled = self.cap, self.occ, self.U, self.lim, self.enabled
        for _, _, c, t in heads:
            p, fi, size = self.cr_pol[c], self.cr_prof[c], t.size
            if any(key < t.key and n <= size for key, n in self.stopping.get(c, ())):
                continue
            if any(U[a] + size > lim[a] for a in self.chain[p]) or not self._budget_ok(p, self.weight[fi]):
                continue
            open_pools = [
                pi
                for pi in (self.pool_ix[pid] for pid in s.profiles[fi].pools)
                if enabled[pi]
                and cap[pi] >= size
                and not (self.closed[pi] and self.capped(pi, p))
                and pi not in self.down
                and (self.gaps is None or self.admits(pi, t, fi))
                and (not self.money or self._money_room(p, pi) >= size)
            ]
            if not open_pools or any(cap[pi] - occ[pi] >= size for pi in open_pools):
                continue
            free = [pi for pi in open_pools if pi not in self.hold]
            if free:
                self.hold[max(free, key=lambda pi: (cap[pi] - occ[pi], -free.index(pi)))] = t.id

    def _head(self, c: int):
        """The first task of compute resource c's queue that its array's cap does not hold."""
        queue = self.s.waiting[self.cr_id[c]]
        left = self.array_left
        if not left:
            return queue[0]
        return next((t for t in queue if t.array is None or left.get(t.array, 1) > 0), None)
