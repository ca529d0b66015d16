"""The reclaim phase of a pass: work below its reservation takes room back by preempting borrowed
work, all or nothing, from the policy furthest above its reservation first, and within a policy the
work that loses least first (GPUs x time since its last checkpoint or run start), newest placed
first among equal losses, never taking a victim's policy (or an ancestor not shared with the task's
policy) below its reservation and sparing protected work (`pass_guards`). A victim whose policy is
an ancestor of the task's counts the task's placement inside it: the ancestor ends at or above its
reservation.
"""

from __future__ import annotations

from datetime import timedelta
from heapq import heapify, heappop, heappush

from .pass_fill import FillPhase
from .pass_guards import ReclaimGuards
from .pass_state import RECLAIM

US = timedelta(microseconds=1)


class ReclaimPhase(FillPhase, ReclaimGuards):
    def _reclaim_phase(self) -> None:
        cap, occ, U, res, lim, anc = self.cap, self.occ, self.U, self.res, self.lim, self.anc
        memo: dict[int, list[int]] = {}
        for pi, fi in self.steps:
            ms, w = self.min_size[fi], self.weight[fi]
            reach = None  # room on pi plus what reclaim could free there, once a task asks
            shut = self.closed[pi]
            for c in self._candidates(RECLAIM, fi, memo):
                if reach is not None and reach < ms:
                    break
                p = self.cr_pol[c]
                if shut and self.capped(pi, p):
                    continue
                q = None
                ceiling = res[p]
                while True:
                    b = min(res[p] - U[p], ceiling)
                    if reach is not None and reach < b:
                        b = reach
                    if self.money:
                        b = min(b, self._money_room(p, pi))
                    if b < ms or not self._budget_ok(p, w):
                        break
                    if q is None:
                        q = self._queue(c)
                    i = q.peek(b, pi)
                    if i < 0:
                        break
                    task = q.tasks[i]
                    room = cap[pi] - occ[pi]
                    if room < task.size:
                        reach = room + self._borrowed_on(pi)
                        if reach >= task.size:
                            reach = room + self._freeable(pi, anc[p], task.size)
                        if reach < task.size:
                            continue
                    fits = room >= task.size and all(U[a] + task.size <= lim[a] for a in anc[p])
                    if fits or self._reclaim(p, task.size, pi, task.id, c):
                        self._place(c, q, i, task, pi, RECLAIM)
                        reach = None
                    else:
                        ceiling = task.size - 1

    def _running_on(self, pi: int) -> list[int]:
        """Running work with GPUs on pool pi, in placement order (grouped on first use)."""
        if self.on_pool is None:
            self.on_pool = [[] for _ in self.s.pools]
            for k, (pool, size, gone) in enumerate(zip(self.run_pool, self.run_size, self.gone, strict=True)):
                if size and not gone:
                    self.on_pool[pool].append(k)
        return self.on_pool[pi]

    def _victims_on(self, pi: int) -> dict[int, list[int]]:
        """Running work with GPUs on pool pi, by policy, in placement order (built on first use)."""
        got = self.by_pool.get(pi)
        if got is None:
            got = self.by_pool[pi] = {}
            cr_pol, run_cr = self.cr_pol, self.run_cr
            for k in self._running_on(pi):
                got.setdefault(cr_pol[run_cr[k]], []).append(k)
        return got

    def _victims_of(self) -> dict[int, list[int]]:
        """Running work with GPUs by policy, in placement order (built on first use)."""
        if self.by_policy is None:
            self.by_policy = {}
            cr_pol, run_cr = self.cr_pol, self.run_cr
            for k, (c, size) in enumerate(zip(run_cr, self.run_size, strict=True)):
                if size:
                    self.by_policy.setdefault(cr_pol[c], []).append(k)
        return self.by_policy

    def _by_loss(self, ks: list[int]) -> list[int]:
        """Running work ks (a list of `_victims_on` or `_victims_of`, in placement order) in the
        order victims are read from its end: the work that loses least comes last, and among equal
        losses the newest placed. Sorted once per pass, when a phase first reads it."""
        memo = self.__dict__.setdefault("by_loss", {})
        got = memo.get(id(ks))
        if got is None:
            placed, now = self.s.placed, self.s.now
            lost = [lost_work(placed[k], now) for k in ks]
            if all(a >= b for a, b in zip(lost, lost[1:], strict=False)):
                got = ks
            else:
                got = [k for _, k in sorted(zip(lost, ks, strict=True), key=lambda x: x[0], reverse=True)]
            memo[id(ks)] = got
        return got

    def _pool_use(self, pi: int) -> dict[int, int]:
        """GPUs of running work on pool pi, by policy (built on first use)."""
        got = self.pool_use.get(pi)
        if got is None:
            got = self.pool_use[pi] = {}
            cr_pol, run_cr, run_size, gone = self.cr_pol, self.run_cr, self.run_size, self.gone
            for k in self._running_on(pi):
                if not gone[k]:
                    q = cr_pol[run_cr[k]]
                    got[q] = got.get(q, 0) + run_size[k]
        return got

    def _borrowed_on(self, pi: int) -> int:
        """A quick upper bound on what reclaim could free on pool pi, fixed when first asked in
        the reclaim phase: the GPUs there of policies that borrow or have children (whose usage
        can still rise in this phase)."""
        if self.borrowed is None:
            U, res, cr_pol = self.U, self.res, self.cr_pol
            lender = [U[q] > res[q] or bool(self.children[q]) for q in range(len(U))]
            self.borrowed = borrowed = [0] * len(self.s.pools)
            for c, pool, size, gone in zip(self.run_cr, self.run_pool, self.run_size, self.gone, strict=True):
                if not gone and lender[cr_pol[c]]:
                    borrowed[pool] += size
        return self.borrowed[pi]

    def _freeable(self, pi: int, ancestors: tuple[int, ...] = (), s: int = 0) -> int:
        """An upper bound on the room reclaim could free on pool pi for a task of size s whose
        policy has these ancestors: each borrowing policy's running GPUs there, at most its excess
        over its reservation (an ancestor's excess counting the task's own GPUs, which stay in it).
        The base is cached until state changes."""
        got = self.freeable_at.get(pi)
        if got is not None and got[0] == self.version:
            bound = got[1]
        else:
            U, res = self.U, self.res
            bound = 0
            for q, use in self._pool_use(pi).items():
                if U[q] > res[q]:
                    bound += min(use, U[q] - res[q])
            self.freeable_at[pi] = (self.version, bound)
        if ancestors and s:
            U, res, use = self.U, self.res, self._pool_use(pi)
            for a in ancestors:
                mine = use.get(a)
                if mine:
                    bound += min(mine, max(0, U[a] - res[a] + s)) - min(mine, max(0, U[a] - res[a]))
        return bound

    def _subtree(self, a: int) -> list[int]:
        got = self.subtrees.get(a)
        if got is None:
            got, todo = [], [a]
            while todo:
                i = todo.pop()
                got.append(i)
                todo.extend(reversed(self.children[i]))
            self.subtrees[a] = got
        return got

    def _room(self, pi: int, size: int, ancestors: tuple[int, ...]) -> bool:
        U, lim = self.U, self.lim
        return self.occ[pi] + size <= self.cap[pi] and all(U[a] + size <= lim[a] for a in ancestors)

    def _reclaim(self, p: int, s: int, pi: int, for_task: str, c: int) -> bool:
        """Preempt borrowed work so that a task of policy p and size s fits on pool pi; all or
        nothing.

        What blocks the task: too little room on pi, and ancestors at their limit (only work in
        that ancestor's subtree, on any pool, can give headroom there). Victims come from the
        policy furthest above its reservation (recomputed as victims are taken), the work that
        loses least first (then newest placed), skipping work that would not help or would take
        its policy, or an ancestor not shared with the task's policy, below its reservation (a
        shared ancestor's GPUs stay in its subtree: a team takes back from its sibling what the
        sibling borrowed of its reservation, even while their department as a whole is below its
        own), and work that is protected (minimum runtime, preemption cap). When that fails only
        because of protected work, the compute resource c's tasks of size s are recorded as held
        (for their verdict).
        """
        key = (pi, p)
        failed = self.reclaim_failed.get(key)
        if failed is not None and failed[0] <= s:
            if failed[0] == s and failed[1] is not None:
                self.held.setdefault((c, s), failed[1])
            return False
        needed, skipped = self._select(p, s, pi, True)
        if needed is None:
            # Least lost work first can take small work that leaves larger work unable to go (its
            # policy would fall below its reservation); today's order (newest first) is tried then.
            needed, skipped = self._select(p, s, pi, True, False)
        if needed is None and skipped:
            # Skipping protected work can steer the greedy choice away from a set of victims
            # none of which is protected; the choice made without skipping is then taken.
            free, _ = self._select(p, s, pi, False, False)
            if free is not None:
                held = self._protection(free, pi)
                if held is None:
                    needed = free
                else:
                    self.held.setdefault((c, s), held)
                    self.reclaim_failed[key] = (s, held)
                    return False
        if needed is None:
            self.reclaim_failed[key] = (s, None)
            return False
        for k in reversed(needed):
            self._preempt(k, RECLAIM, for_task)
        return True

    def _select(
        self, p: int, s: int, pi: int, honour: bool, by_loss: bool = True
    ) -> tuple[list[int] | None, bool]:
        """The victims to preempt (newest last), or None when no choice makes room; state is left
        as it was. `honour`: skip protected work; the flag says whether any was skipped.
        `by_loss`: within a policy, least lost work first (else newest placed first)."""
        U, res = self.U, self.res
        ancestors = self.anc[p]
        # An ancestor's excess over its reservation counts the task's own GPUs, which stay in it.
        back = dict.fromkeys(ancestors, s)
        extra = back.get
        needy = [a for a in ancestors if U[a] + s > self.lim[a]]
        lists: dict[int, list[int]] = {}
        if self.occ[pi] + s > self.cap[pi]:
            for q, ks in self._victims_on(pi).items():
                if U[q] + extra(q, 0) > res[q]:
                    lists[q] = self._by_loss(ks) if by_loss else ks
        for a in needy:
            by_policy = self._victims_of()
            for q in self._subtree(a):
                if U[q] + extra(q, 0) > res[q] and q in by_policy:
                    lists[q] = self._by_loss(by_policy[q]) if by_loss else by_policy[q]
        if self.guarded:
            lists = {q: ks for q, ks in lists.items() if q not in self.never_victim}
        heap = [(res[q] - U[q] - extra(q, 0), q) for q in lists]
        heapify(heap)
        cursor = {q: len(ks) - 1 for q, ks in lists.items()}
        taken: list[int] = []
        took: dict[int, int] = {}
        skipped = [False]
        while not self._room(pi, s, ancestors):
            if not heap:
                for k in taken:
                    self._take(k, +1)
                return None, skipped[0]
            key, q = heappop(heap)
            now = res[q] - U[q] - extra(q, 0)
            if key != now:
                if now < 0:
                    heappush(heap, (now, q))
                continue
            guard = (took, skipped) if honour and self.guarded else None
            k = self._victim(q, lists[q], cursor, pi, s, self.chain[p], needy, guard)
            if k < 0:
                continue
            self._take(k, -1)
            taken.append(k)
            took[q] = took.get(q, 0) + 1
            now = res[q] - U[q] - extra(q, 0)
            if now < 0:
                heappush(heap, (now, q))
        needed = []
        for k in reversed(taken):
            self._take(k, +1)
            if not self._room(pi, s, ancestors):
                self._take(k, -1)
                needed.append(k)
        for k in needed:
            self._take(k, +1)
        return needed, skipped[0]

    def _victim(self, q, ks, cursor, pi, s, inside, needy, guard=None) -> int:
        """q's next running task (least lost work first, then newest) that helps and keeps
        reservations whole, or -1. With `guard` (victims taken per policy, a flag to set),
        protected work is skipped and flagged."""
        U, res, lim, gone, sizes = self.U, self.res, self.lim, self.gone, self.run_size
        chain = self.chain[q]
        pool_short = self.occ[pi] + s > self.cap[pi]
        i = cursor[q]
        while i >= 0:
            k = ks[i]
            i -= 1
            if gone[k]:
                continue
            size = sizes[k]
            helps = (pool_short and self.run_pool[k] == pi) or any(
                a in chain and U[a] + s > lim[a] for a in needy
            )
            back = s if q in inside else 0  # a victim of an ancestor: the task's GPUs count in it
            keeps = U[q] - size + back >= res[q] and all(
                U[b] - size >= res[b] for b in chain if b not in inside
            )
            if helps and keeps:
                if guard is not None and self._guard(k, q, guard[0].get(q, 0)) is not None:
                    guard[1][0] = True
                    continue
                cursor[q] = i
                return k
        cursor[q] = i
        return -1


def lost_work(t, now) -> int:
    """What preempting placed task t at `now` loses, in milli-GPU-microseconds: its GPUs times the
    time since its work was last saved (its last checkpoint or its run's start)."""
    saved = t.saved_at or t.placed_at
    return t.size * max(0, (now - saved) // US)
