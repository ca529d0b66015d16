"""Priority inside a policy: after reclaim, a waiting task whose policy (or an ancestor) is at its
limit, or that is inside its policy's reservation with no room on the pool, may preempt the same
policy's running work of strictly lower priority, the work that loses least first (GPUs x time
since its last checkpoint or run start; `pass_reclaim.lost_work`), then youngest placed, all or
nothing (reason
"priority", phase "priority"). Only as much as the task needs is taken, and never so much that the
policy would borrow more than before: it replaces its own work and may grow only into its own
reservation, so what other groups may take is unchanged. Never another policy's work; a victim
within its profile's minimum runtime is spared; a pool held by the starvation guard is left to
its holder. With no priorities that differ the phase ends before reading any queue.
"""

from __future__ import annotations

from operator import attrgetter

from .pass_reclaim import ReclaimPhase

PRIORITY = "priority"
PRIORITY_OF = attrgetter("priority")


class PriorityPhase(ReclaimPhase):
    def _priority_phase(self) -> None:
        lowest = self._lowest_running()
        if not lowest:
            return
        cap, occ, U, res, lim, chain = self.cap, self.occ, self.U, self.res, self.lim, self.chain
        failed: dict[tuple[int, int], tuple[int, int]] = {}  # (pool, policy) -> (size, priority)
        for pi, fi in self.steps:
            ms, w = self.min_size[fi], self.weight[fi]
            shut = self.closed[pi]
            for c in self._active(fi):
                p = self.cr_pol[c]
                floor = lowest.get(p)
                if floor is None or (shut and self.capped(pi, p)):
                    continue
                q = self._queue(c)
                ceiling = cap[pi]
                while ceiling >= ms and self._budget_ok(p, w):
                    b = min(ceiling, self._money_room(p, pi)) if self.money else ceiling
                    if b < ms:
                        break
                    i = q.peek(b, pi)
                    if i < 0:
                        break
                    task = q.tasks[i]
                    s = task.size
                    if task.priority <= floor:
                        break
                    if self.hold and self.hold.get(pi, task.id) != task.id:
                        break
                    at_limit = any(U[a] + s > lim[a] for a in chain[p])
                    inside = U[p] + s <= res[p] and occ[pi] + s > cap[pi]
                    miss = failed.get((pi, p))
                    if not (at_limit or inside) or (miss and miss[0] <= s and miss[1] >= task.priority):
                        ceiling = s - 1
                        continue
                    victims = self._priority_select(p, s, pi, task.priority)
                    if victims is None:
                        failed[(pi, p)] = (s, task.priority)
                        ceiling = s - 1
                        continue
                    for k in victims:
                        self._preempt(k, PRIORITY, task.id)
                    self._place(c, q, i, task, pi, PRIORITY)
                    floor = self._lowest_of(p)
                    lowest[p] = floor
                    if floor is None:
                        break

    def _lowest_running(self) -> dict[int, int]:
        """Each policy whose queue head outranks some of its own running work: the lowest priority
        of that work. Only the heads of queues whose policy runs work of its own are read, and
        placed work is scanned by policy only when some head outranks the lowest running priority
        in the estate."""
        cr_pol, cr_id, waiting = self.cr_pol, self.cr_id, self.s.waiting
        own = list(self.U)
        for p, chain in enumerate(self.chain):
            if len(chain) > 1:
                own[chain[1]] -= self.U[p]
        top: dict[int, int] = {}
        for cs in self.waiting_by_profile:
            for c in cs:
                p = cr_pol[c]
                if own[p] <= 0:
                    continue
                head = waiting[cr_id[c]][0].priority
                if head > top.get(p, head - 1):
                    top[p] = head
        placed = self.s.placed
        if not top or max(top.values()) <= min(map(PRIORITY_OF, placed), default=0):
            return {}
        gone, run_cr = self.gone, self.run_cr
        lowest: dict[int, int] = {}
        for k, t in enumerate(placed):
            p = cr_pol[run_cr[k]]
            if p in top and t.priority < top[p] and not gone[k] and t.size:
                if t.priority < lowest.get(p, t.priority + 1):
                    lowest[p] = t.priority
        return lowest

    def _lowest_of(self, p: int) -> int | None:
        """The lowest priority of policy p's running work now, or None when it has none."""
        placed, gone, sizes = self.s.placed, self.gone, self.run_size
        running = self._victims_of().get(p, ())
        return min((placed[k].priority for k in running if not gone[k] and sizes[k]), default=None)

    def _priority_select(self, p: int, s: int, pi: int, priority: int) -> list[int] | None:
        """Policy p's running work of priority below `priority` to preempt so that a task of size s
        fits on pool pi, least lost work first, then youngest; None when it cannot. Policy p may
        end at most at the larger of its usage now and its reservation. State is left as it was."""
        U, res, gone, sizes, placed = self.U, self.res, self.gone, self.run_size, self.s.placed
        chain = self.chain[p]
        top = list(self.lim[a] for a in chain)
        top[0] = min(top[0], max(U[p], res[p]))

        def fits() -> bool:
            return self.occ[pi] + s <= self.cap[pi] and all(
                U[a] + s <= t for a, t in zip(chain, top, strict=True)
            )

        taken: list[int] = []
        mine = self._victims_of().get(p)
        ks = self._by_loss(mine) if mine else ()
        for k in reversed(ks):
            if fits():
                break
            if gone[k] or not sizes[k] or placed[k].priority >= priority:
                continue
            limit_short = any(U[a] + s > t for a, t in zip(chain, top, strict=True))
            if not (limit_short or (self.occ[pi] + s > self.cap[pi] and self.run_pool[k] == pi)):
                continue
            if self._young(k):
                continue
            self._take(k, -1)
            taken.append(k)
        if not fits():
            for k in taken:
                self._take(k, +1)
            return None
        needed = []
        for k in reversed(taken):
            self._take(k, +1)
            if not fits():
                self._take(k, -1)
                needed.append(k)
        for k in needed:
            self._take(k, +1)
        needed.reverse()
        return needed

    def _young(self, k: int) -> bool:
        """Whether running task k is still within its profile's minimum runtime."""
        mr = self.min_run[self.cr_prof[self.run_cr[k]]]
        return mr is not None and self.s.placed[k].placed_at + mr > self.s.now
