"""Fair sharing in a pass: under a parent whose `lending` is "fair", what its children borrow above
their reservations is shared in proportion to their over-quota weights (`fair.fair_shares`).

After the reclaim phase, each fair parent's split is computed top-down (a fair child that is itself
a fair parent shares out at most its own share). Then:
- fair reclaim: a child below its fair share whose waiting task does not fit takes room from the
  sibling furthest above its share (newest placed first), only while that sibling is further above
  its share than the reclaimer would be with the task (so each move makes the two fairer and none
  is undone by the next pass), never below the sibling's (or any of its descendants') reservation,
  and sparing protected work (`pass_guards`); reason "fair_share";
- a fair lend: each fair child borrows at most its share (`fair_top`), before the plain lend gives
  what is left in queuing order, so idle GPUs never stay idle for fairness' sake.
"""

from __future__ import annotations

from .fair import Claim, fair_shares
from .pass_reclaim import ReclaimPhase
from .pass_state import RECLAIM

FAIR_SHARE = "fair_share"


class FairPhase(ReclaimPhase):
    def _fair_reclaim_phase(self) -> None:
        self._fair_split()
        fair_failed: dict[tuple[int, int], int] = {}
        for pi, fi in self.steps:
            ms, w = self.min_size[fi], self.weight[fi]
            for c in self._active(fi):
                p = self.cr_pol[c]
                if not self._fair_levels(p) or (self.closed[pi] and self.capped(pi, p)):
                    continue
                q = None
                while True:
                    levels = self._fair_levels(p)
                    b = self._fair_bound(p, levels)
                    if b < ms or not self._budget_ok(p, w):
                        break
                    if q is None:
                        q = self._queue(c)
                    i = q.peek(b)
                    if i < 0:
                        break
                    task = q.tasks[i]
                    if self.hold and self.hold.get(pi, task.id) != task.id:
                        break
                    if self._room(pi, task.size, self.anc[p]):
                        break  # it fits: the fair lend places it
                    key = (pi, p)
                    if fair_failed.get(key, task.size + 1) <= task.size:
                        break
                    victims = self._fair_select(p, task.size, pi, levels)
                    if victims is None:
                        fair_failed[key] = task.size
                        break
                    for k in victims:
                        self._preempt(k, FAIR_SHARE, task.id)
                    self._place(c, q, i, task, pi, RECLAIM)

    def _fair_split(self) -> None:
        """Each fair child's share of borrowed milli-GPUs (`share`) and its ceiling in the fair
        lend (`fair_top`), parents nearest the root first."""
        U, res, lim = self.U, self.res, self.lim
        free = sum(c - o for c, o, on in zip(self.cap, self.occ, self.enabled, strict=True) if on)
        top = list(lim)
        for a in sorted(self.fair_parents, key=lambda a: (len(self.chain[a]), a)):
            kids = self.children[a]
            borrowed = [max(0, U[k] - res[k]) for k in kids]
            available = sum(borrowed) + max(0, min(top[a] - U[a], free))
            claims = []
            for k, lent in zip(kids, borrowed, strict=True):
                room = lim[k] - res[k]
                if self._budget_stopped(k):
                    want = lent
                else:
                    want = max(0, U[k] + self._waiting_gpus(k, lim[k] - U[k]) - res[k])
                claims.append(Claim(self.s.policies[k].over_quota_weight, max(0, min(room, want))))
            for k, share in zip(kids, fair_shares(available, claims), strict=True):
                self.share[k] = share
                top[k] = min(lim[k], res[k] + share)
        self.fair_top = top

    def _budget_stopped(self, k: int) -> bool:
        return any(self.rem[j] <= 0 for j in self.bchain[k])

    def _waiting_gpus(self, k: int, bound: int) -> int:
        """The GPUs of work still waiting in policy k's subtree, counted up to `bound`."""
        if bound <= 0:
            return 0
        total = 0
        for p in self._subtree(k):
            for c in self._resources_of(p):
                tasks = self.s.waiting.get(self.cr_id[c], ())
                if not tasks:
                    continue
                q = self.queues.get(c)
                placed = set(q.placed) if q and q.placed else ()
                for i, t in enumerate(tasks):
                    if i not in placed:
                        total += t.size
                        if total >= bound:
                            return bound
        return total

    def _resources_of(self, p: int) -> list[int]:
        by = getattr(self, "_by_policy_cr", None)
        if by is None:
            by = self._by_policy_cr = {}
            for c, q in enumerate(self.cr_pol):
                by.setdefault(q, []).append(c)
        return by.get(p, [])

    def _fair_levels(self, p: int) -> list[int]:
        """The fair children of p's chain (p first) below their share, up to the first that is not:
        a group at its share does not take more through a level above it."""
        U, res, share = self.U, self.res, self.share
        levels = []
        for n in self.chain[p]:
            if n in share:
                if U[n] - res[n] >= share[n]:
                    break
                levels.append(n)
        return levels

    def _fair_bound(self, p: int, levels: list[int]) -> int:
        """The largest task p may take by fair reclaim: within its chain's limits up to the highest
        level below its share (those above are made room in by the victims)."""
        U, lim = self.U, self.lim
        top = levels[-1] if levels else p
        b = None
        for n in self.chain[p]:
            h = lim[n] - U[n]
            b = h if b is None else min(b, h)
            if n == top:
                break
        return b if levels else -1

    def _fair_select(self, p: int, s: int, pi: int, levels: list[int]) -> list[int] | None:
        """Victims in siblings above their share so that a task of p and size s fits on pool pi,
        trying p's nearest fair level first; None when no level frees enough. State is left as it
        was."""
        for n in levels:
            if self.U[n] - self.res[n] >= self.share[n]:
                continue
            got = self._fair_select_at(p, s, pi, n)
            if got is not None:
                return got
        return None

    def _fair_select_at(self, p: int, s: int, pi: int, n: int) -> list[int] | None:
        U, res, share = self.U, self.res, self.share
        parent = self.chain[n][1]
        after = U[n] - res[n] + s - share[n]  # how far above its share the reclaimer ends
        reach = set(self.chain[parent])
        short_above = [a for a in self.anc[p] if a in reach and U[a] + s > self.lim[a]]
        if any(U[a] + s > self.lim[a] for a in self.chain[p] if a not in reach):
            return None  # a limit below the parent binds: work outside it cannot make room
        by_policy = self._victims_of()
        taken: list[int] = []
        took: dict[int, int] = {}
        siblings = [m for m in self.children[parent] if m != n and m in share]
        while not self._room(pi, s, self.anc[p]):
            best = None
            for m in sorted(siblings, key=lambda m: (share[m] - (U[m] - res[m]), m)):
                if U[m] - res[m] - share[m] <= after:
                    break  # taking from m would not leave the two fairer than now
                k = self._fair_victim(m, by_policy, pi, s, after, short_above, took)
                if k >= 0:
                    best = k
                    break
            if best is None:
                for k in taken:
                    self._take(k, +1)
                return None
            self._take(best, -1)
            taken.append(best)
            q = self.cr_pol[self.run_cr[best]]
            took[q] = took.get(q, 0) + 1
        for k in taken:
            self._take(k, +1)
        return taken

    def _fair_victim(self, m, by_policy, pi, s, after, short_above, took) -> int:
        """Sibling m's newest running task that helps the waiting task and keeps every reservation
        in m's subtree whole; -1 if none. (The caller checks m stays above the reclaimer.)"""
        U, res, gone, sizes = self.U, self.res, self.gone, self.run_size
        pool_short = self.occ[pi] + s > self.cap[pi]
        ks = sorted(k for q in self._subtree(m) for k in by_policy.get(q, ()))
        for k in reversed(ks):
            if gone[k] or not sizes[k]:
                continue
            size = sizes[k]
            if not ((pool_short and self.run_pool[k] == pi) or short_above):
                continue
            q = self.cr_pol[self.run_cr[k]]
            chain = self.chain[q]
            if any(U[b] - size < res[b] for b in chain[: chain.index(m) + 1]):
                continue
            if q in self.never_victim or (self.guarded and self._guard(k, q, took.get(q, 0)) is not None):
                continue
            return k
        return -1
