"""Fair sharing in a pass: under a parent whose `lending` is "fair", what its children borrow above
their reservations is shared in proportion to their over-quota weights (`fair.fair_shares`).

After the reclaim phase (and its second fill), each fair parent's split is computed top-down (a fair
child that is itself a fair parent shares out at most its own share). Then, in this order:
- a fair lend: each fair child borrows at most its share (`fair_top`), so free GPUs go to those
  below their share first; the plain lend, last in the pass, gives what is left in queuing order,
  so idle GPUs never stay idle for fairness' sake;
- fair reclaim: a child below its fair share whose waiting task still does not fit takes room from
  the sibling furthest above its share (newest placed first), only while that sibling is above its
  share and further above it than the reclaimer would be with the task (so each move makes the two
  fairer and none is undone by the next pass), never below the sibling's (or any of its
  descendants') reservation, and sparing protected work (`pass_guards`); reason "fair_share".
"""

from __future__ import annotations

from heapq import heapify, heappop, heappush
from operator import attrgetter, itemgetter, sub

from .fair import Claim, fair_shares
from .pass_fair_index import FairIndex
from .pass_state import RECLAIM

FAIR_SHARE = "fair_share"
SIZE = attrgetter("size")


class FairPhase(FairIndex):
    def _fair_reclaim_phase(self) -> None:
        fair_failed: dict[tuple[int, int], int] = {}
        memo: dict[int, tuple] = {}
        for pi, fi in self.steps:
            ms, w = self.min_size[fi], self.weight[fi]
            active, anywhere, groups = self._gainers(fi, ms, memo)
            here = [j for pools, js in groups if any(pi in on for on in pools) for j in js]
            if len(groups) > 1:
                here.sort()
            for j in anywhere if not here else here if not anywhere else sorted(anywhere + here):
                c = active[j]
                p = self.cr_pol[c]
                if self.closed[pi] and self.capped(pi, p):
                    continue
                q = None
                while True:
                    levels = self._fair_levels(p)
                    b = self._fair_bound(p, levels)
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
                    if self.hold and self.hold.get(pi, task.id) != task.id:
                        break
                    if self._room(pi, task.size, self.anc[p]):
                        break  # it fits: no need to stop anything, the lend places it
                    key = (pi, p)
                    if fair_failed.get(key, task.size + 1) <= task.size:
                        break
                    victims = self._fair_select(p, task.size, pi, levels)
                    if victims is None:
                        fair_failed[key] = task.size
                        break
                    for k in victims:
                        self._preempt(k, FAIR_SHARE, task.id)
                        self._fair_gone(k)
                    self._place(c, q, i, task, pi, RECLAIM)

    def _fair_split(self) -> None:
        """Each fair child's share of borrowed milli-GPUs (`share`) and its ceiling in the fair
        lend (`fair_top`), parents nearest the root first; for parents with work waiting below
        them only."""
        U, res, lim = self.U, self.res, self.lim
        free = self.free_gpus()
        top = list(lim)
        waiting = self._waiting_by_policy()
        children, bchain, policies = self.children, self.bchain, self.s.policies
        for a in sorted(self.fair_parents, key=lambda a: (len(self.chain[a]), a)):
            kids = children[a]
            wait = [sum(waiting[p] for p in self._subtree(k)) if children[k] else waiting[k] for k in kids]
            if not any(wait):
                continue  # nothing waits below it: no lend, reclaim or verdict needs its split
            borrowed = [max(0, U[k] - res[k]) for k in kids]
            available = sum(borrowed) + max(0, min(top[a] - U[a], free))
            claims = []
            for k, lent, more in zip(kids, borrowed, wait, strict=True):
                stopped = (bchain[k] or self.money) and self._budget_stopped(k)
                want = lent if stopped else U[k] + more - res[k]
                claims.append(Claim(policies[k].over_quota_weight, max(0, min(lim[k] - res[k], want))))
            for k, share in zip(kids, fair_shares(available, claims), strict=True):
                self.share[k] = share
                top[k] = min(lim[k], res[k] + share)
        self.fair_top = top

    def _budget_stopped(self, k: int) -> bool:
        return any(self.rem[j] <= 0 for j in self.bchain[k]) or (
            self.money and any(self.mrem[m] <= 0 for m in self.mchain[k])
        )

    def _waiting_by_policy(self) -> list[int]:
        """The GPUs of work still waiting, by policy (of its own compute resources)."""
        waiting = [0] * len(self.res)
        profiles, queues, got = self.s.profiles, self.queues, self.s.waiting.get
        for c, rid in enumerate(self.cr_id):
            tasks = got(rid)
            if not tasks:
                continue
            f = profiles[self.cr_prof[c]]
            total = sum(map(SIZE, tasks)) if f.size_from_task else len(tasks) * f.size
            q = queues.get(c)
            if q is not None and q.placed:
                total -= sum(tasks[i].size for i in q.placed)
            waiting[self.cr_pol[c]] += total
        return waiting

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
        after = U[n] - res[n] + s - share[n]  # how far above its share the reclaimer would end
        if self._best_excess(parent) <= max(after, 0):
            return None  # no sibling is above its share and further above it than n would be
        reach = self.chain[parent]
        if any(U[a] + s > self.lim[a] for a in self.chain[p] if a not in reach):
            return None  # a limit below the parent binds: work outside it cannot make room
        short_above = any(U[a] + s > self.lim[a] for a in reach)
        failed = self.fair_failed
        key = (pi, parent, short_above)
        last = failed.get(key)
        if last is not None and last[0] <= s and last[1] <= after:
            return None  # failed here already for a smaller task and a reclaimer further below
        lists = self._fair_lists(parent, None if short_above else pi)
        floor = max(after, 0)  # a victim's group must stay above this, before the victim goes
        cursor = {m: len(ks) - 1 for m, ks in lists.items() if m != n and U[m] - res[m] - share[m] > floor}
        if not cursor:
            failed[key] = (s, after)
            return None
        if self._fair_cannot(parent, pi, s, floor, short_above, cursor):
            failed[key] = (s, after)
            return None
        heap = [(share[m] + res[m] - U[m], m) for m in cursor]  # furthest above its share first
        heapify(heap)
        taken: list[int] = []
        took: dict[int, int] = {}
        while not self._room(pi, s, self.anc[p]):
            m = None
            while heap:
                key_m, m = heappop(heap)
                if key_m != share[m] + res[m] - U[m]:
                    heappush(heap, (share[m] + res[m] - U[m], m))
                    m = None
                    continue
                if -key_m <= floor:  # only a sibling above its share, and above n after
                    heap.clear()
                    m = None
                break
            if m is None:
                for k in taken:
                    self._take(k, +1)
                failed[key] = (s, after)
                return None
            k = self._fair_victim(m, lists[m], cursor, pi, s, short_above, took)
            if k < 0:
                continue  # m has nothing more that may go: it stays out of the heap
            self._take(k, -1)
            taken.append(k)
            q = self.cr_pol[self.run_cr[k]]
            took[q] = took.get(q, 0) + 1
            heappush(heap, (share[m] + res[m] - U[m], m))
        needed = []  # hand back what turns out not to be needed, last taken first (as reclaim does)
        for k in reversed(taken):
            self._take(k, +1)
            if not self._room(pi, s, self.anc[p]):
                self._take(k, -1)
                needed.append(k)
        for k in needed:
            self._take(k, +1)
        return needed

    def _gainers(self, fi: int, size: int, memo: dict) -> tuple[list[int], list[int], list[tuple]]:
        """The profile's compute resources with waiting work (`_active`) and, by their place in it,
        those fair reclaim may serve: those that may find victims on any pool (a parent at its
        limit), and groups of those that may find them on the pools of some parents (each group:
        those parents' `_over_pools`, its places in queuing order). Found once per pass: as the
        phase goes on, groups below their share only rise and those above only fall, so the lists
        can only hold more than they need (each attempt checks again); a group that a fair reclaim
        takes below its share waits for the next pass."""
        got = memo.get(fi)
        if got is None:
            anywhere: list[int] = []
            by_parents: dict[tuple[int, ...], list[int]] = {}
            for j, c in enumerate(self._active(fi)):
                parents = self._gain_parents(self.cr_pol[c], size)
                if parents is None:
                    anywhere.append(j)
                elif parents:
                    by_parents.setdefault(parents, []).append(j)
            over = self._over_pools
            groups = [(tuple(over(a) for a in key), js) for key, js in by_parents.items()]
            got = memo[fi] = (self._active(fi), anywhere, groups)
        return got

    def _gain_parents(self, p: int, size: int) -> tuple[int, ...] | None:
        """Whose children's pools a task of p of `size` may take from: the parents of p's fair levels
        below their share with a child further above its share than the level would be with the
        task; None (any pool) when such a parent is at its limit. Empty: nowhere."""
        U, res, share = self.U, self.res, self.share
        parents = []
        for n in self._fair_levels(p):
            parent = self.chain[n][1]
            if self._best_excess(parent) > max(U[n] - res[n] + size - share[n], 0):
                if U[parent] + size > self.lim[parent]:
                    return None
                self._over_pools(parent)  # the index is fixed here, when first asked for
                parents.append(parent)
        return tuple(parents)

    def _mark(self) -> tuple[int, int]:
        """Changes only when work is placed or stopped for good (trials restore what they take)."""
        return len(self.placements), len(self.preemptions)

    def _best_excess(self, parent: int) -> int:
        """The largest excess over its fair share among the parent's children, cached until work
        is placed or stopped (a selection that fails leaves the state as it was)."""
        cache = self.excess_at
        mark = self._mark()
        got = cache.get(parent)
        if got is not None and got[0] == mark:
            return got[1]
        kids = self.excess_of.get(parent)
        if kids is None:
            ms = [m for m in self.children[parent] if m in self.share]
            base = [self.res[m] + self.share[m] for m in ms]
            kids = self.excess_of[parent] = (itemgetter(*ms, ms[0]), base)  # a tuple even for one
        read, base = kids
        best = max(map(sub, read(self.U), base))
        cache[parent] = (mark, best)
        return best

    def _fair_victim(self, m, ks, cursor, pi, s, short_above, took) -> int:
        """Sibling m's newest running task that helps the waiting task and keeps every reservation
        in m's subtree whole; -1 if none. (The caller checks m stays above the reclaimer.)"""
        U, res, gone, sizes = self.U, self.res, self.gone, self.run_size
        pool_short = self.occ[pi] + s > self.cap[pi]
        i = cursor[m]
        while i >= 0:
            k = ks[i]
            i -= 1
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
            cursor[m] = i
            return k
        cursor[m] = i
        return -1
