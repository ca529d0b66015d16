"""The compute policy engine pass: `allocate(snapshot) -> Decisions`, pure and deterministic.

A pass runs, in order: budget stops (used-up budgets preempt their running weighted work,
newest placed first), fill reservations, reclaim, lend. When reclaim freed more room than its
reclaimers took, a second fill runs before lending, so that the room goes to reservation-eligible
work first and not to a borrower that the next pass would preempt. Every phase visits work in the
same order: rounds over the r-th choice of each profile's pool list; in a round, pools in snapshot
order; on a pool, profiles in its execution order; in a profile, policies in its queuing order;
in a compute resource, seq order. A task that does not fit does not block smaller ones behind it.
A reached spend cap keeps its policies' new work off its pools; work already there goes on.

A policy's time budget may have several windows (day, week, month): a start must pass the check in
every window, which is the check on the window with the least left, since all share the policy's
running weight; a used-up window stops the policy's weighted work, and the event names the used-up
window that resets last. Reclaim spares a victim that has not yet held its placement for its
profile's minimum runtime, and the work of a policy that has lost its cap of preemptions in the
sliding hour; when only such victims could have made room, the waiting task's verdict says so.

Beyond a setup proportional to the estate (policies, compute resources, running work), cost follows
the queues touched and the placements made, not queue depth: a queue is read lazily, one per-size
head at a time, and a full pool, a policy without room or a budget that forbids starts ends the
visit before any task is read. docs/engine.md gives the rules in plain words.
"""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta
from heapq import heapify, heappop, heappush

from .budget import US_PER_S, period_bounds
from .decisions import Decisions, Placement, Preemption
from .snapshot import Snapshot, SpendCap, WaitingTask
from .verdicts import VerdictBook

FILL, RECLAIM, LEND = "fill", "reclaim", "lend"
HOUR = timedelta(hours=1)
MIN_RUNTIME, MAX_PREEMPTIONS = "min_runtime", "max_preemptions"


def allocate(snapshot: Snapshot) -> Decisions:
    run = _Pass(snapshot)
    run.run()
    return Decisions(tuple(run.placements), tuple(run.preemptions), VerdictBook(run))


class _Queue:
    """One compute resource's queue during a pass.

    With a fixed-size profile the queue is a FIFO with a head index. With sizes from tasks, the
    input is scanned lazily into one FIFO per size; the next task for a bound is the lowest-seq
    head among the sizes that fit. `stopping` holds (seq, size) of this resource's work that is
    being stopped: it goes back to the front, so it blocks work behind it of the same or larger
    size.
    """

    __slots__ = ("tasks", "fixed", "cursor", "heads", "stopping", "placed")

    def __init__(self, tasks, fixed: int | None, stopping: list[tuple[int, int]]):
        self.tasks = tasks
        self.fixed = fixed
        self.cursor = 0
        self.heads: dict[int, deque[int]] = {}
        self.stopping = stopping
        self.placed: list[int] = []

    def _open(self, seq: int, size: int) -> bool:
        return not any(s_seq < seq and s_size <= size for s_seq, s_size in self.stopping)

    def peek(self, bound: int) -> int:
        """Index of the first task in seq order with size <= bound, or -1."""
        tasks = self.tasks
        if self.fixed is not None:
            i = self.cursor
            if self.fixed > bound or i >= len(tasks):
                return -1
            if self.stopping and not self._open(tasks[i].seq, self.fixed):
                return -1
            return i
        best = -1
        for size, fifo in self.heads.items():
            if size <= bound and fifo:
                i = fifo[0]
                if (best < 0 or i < best) and (not self.stopping or self._open(tasks[i].seq, size)):
                    best = i
        if best >= 0:
            return best
        heads = self.heads
        i, n = self.cursor, len(tasks)
        while i < n:
            t = tasks[i]
            fifo = heads.get(t.size)
            if fifo is None:
                fifo = heads[t.size] = deque()
            fifo.append(i)
            i += 1
            if t.size <= bound and len(fifo) == 1 and (not self.stopping or self._open(t.seq, t.size)):
                self.cursor = i
                return i - 1
        self.cursor = i
        return -1

    def pop(self, i: int, task: WaitingTask) -> None:
        if self.fixed is not None:
            self.cursor += 1
        else:
            self.heads[task.size].popleft()
        self.placed.append(i)


class _Pass:
    """The state of one pass, in lists indexed by position in the snapshot."""

    def __init__(self, s: Snapshot):
        self.s = s
        self.lw = s.low_watermark_s * US_PER_S
        pools, profiles, policies, resources = s.pools, s.profiles, s.policies, s.resources

        self.pool_ix = pool_ix = {p.id: i for i, p in enumerate(pools)}
        self.cap = [p.capacity for p in pools]
        self.enabled = [p.enabled for p in pools]
        self.occ = occ = [0] * len(pools)

        self.prof_ix = prof_ix = {f.id: i for i, f in enumerate(profiles)}
        self.weight = [f.time_weight for f in profiles]
        self.min_size = [1 if f.size_from_task else f.size for f in profiles]

        self.pol_ix = pol_ix = {p.id: i for i, p in enumerate(policies)}
        self.res = [p.reservation for p in policies]
        self.lim = [p.limit for p in policies]
        parent = [-1 if p.parent is None else pol_ix[p.parent] for p in policies]
        self.children: list[list[int]] = [[] for _ in policies]
        for i, up in enumerate(parent):
            if up >= 0:
                self.children[up].append(i)
        self.chain = [self._chain(i, parent) for i in range(len(policies))]
        self.anc = [c[1:] for c in self.chain]
        self.rem: list[int | None] = [None] * len(policies)
        self.window: list[str | None] = [None] * len(policies)
        for i, p in enumerate(policies):
            if p.budgets:
                self.rem[i], self.window[i] = self._binding(p.budgets)
        budgeted = any(r is not None for r in self.rem)
        self.bchain = [tuple(j for j in c if self.rem[j] is not None) if budgeted else () for c in self.chain]
        self.U = U = [0] * len(policies)
        self.rw = rw = [0] * len(policies)

        # closed[pi]: the reached spend caps on pool pi, each as (its policy indices, the cap).
        self.closed: list[list[tuple[frozenset[int], SpendCap]] | None] = [None] * len(pools)
        for cap in s.caps:
            shut = frozenset(pol_ix[p] for p in cap.policies)
            for pid in cap.pools:
                pi = pool_ix[pid]
                if self.closed[pi] is None:
                    self.closed[pi] = []
                self.closed[pi].append((shut, cap))

        self.cr_id = [r.id for r in resources]
        self.cr_ix = cr_ix = {r.id: i for i, r in enumerate(resources)}
        self.cr_pol = [pol_ix[r.policy] for r in resources]
        self.cr_prof = [prof_ix[r.profile] for r in resources]

        # The snapshot's placed work, by its index k in `placed`.
        placed = s.placed
        self.run_cr = run_cr = [cr_ix[t.resource] for t in placed]
        self.run_pool = run_pool = [pool_ix[t.pool] for t in placed]
        self.run_size = run_size = [t.size for t in placed]
        self.gone = gone = bytearray(t.preempting for t in placed)
        self.stopping: dict[int, list[tuple[int, int]]] = {}
        use = [0] * len(resources)
        count = [0] * len(resources)
        for k, (c, pi, size, stopping) in enumerate(zip(run_cr, run_pool, run_size, gone, strict=True)):
            if stopping:
                self.stopping.setdefault(c, []).append((placed[k].seq, size))
                continue
            use[c] += size
            count[c] += 1
            occ[pi] += size
        for c, n in enumerate(count):
            if n:
                p = self.cr_pol[c]
                for j in self.chain[p]:
                    U[j] += use[c]
                w = self.weight[self.cr_prof[c]]
                if w:
                    for j in self.bchain[p]:
                        rw[j] += w * n

        self.waiting_by_profile: list[list[int]] = [[] for _ in profiles]
        for rid, queue in s.waiting.items():
            if queue:
                c = cr_ix[rid]
                self.waiting_by_profile[self.cr_prof[c]].append(c)
        self.active: dict[int, list[int]] = {}
        self.steps = self._steps()

        self.queues: dict[int, _Queue] = {}
        self.placements: list[Placement] = []
        self.preemptions: list[Preemption] = []
        self.occ_start: list[int] = []
        self.on_pool: list[list[int]] | None = None
        self.by_pool: dict[int, dict[int, list[int]]] = {}
        self.by_policy: dict[int, list[int]] | None = None
        self.subtrees: dict[int, list[int]] = {}
        self.reclaim_failed: dict[tuple[int, int], int] = {}
        self.pool_use: dict[int, dict[int, int]] = {}
        self.borrowed: list[int] | None = None
        self.version = 0
        self.freeable_at: dict[int, tuple[int, int]] = {}

        # Anti-thrash: each profile's minimum runtime, each capped policy's reclaims left now and
        # the recent reclaim times that free them; `held` records, per (compute resource, size),
        # what protected the victims when only protected work could have made room.
        self.min_run = [timedelta(seconds=f.min_runtime_s) if f.min_runtime_s else None for f in profiles]
        self.cap_left: list[int | None] = [None] * len(policies)
        self.recent: dict[int, list[datetime]] = {}
        for i, p in enumerate(policies):
            if p.max_preemptions_per_hour is not None:
                self.recent[i] = [at for at in p.reclaims if at > s.now - HOUR]
                self.cap_left[i] = p.max_preemptions_per_hour - len(self.recent[i])
        self.never_victim = {i for i, p in enumerate(policies) if p.max_preemptions_per_hour == 0}
        self.guarded = any(self.min_run) or any(c is not None for c in self.cap_left)
        self.reclaimed = [0] * len(policies)
        self.held: dict[tuple[int, int], tuple[str, datetime, str]] = {}

    def _binding(self, budgets) -> tuple[int, str]:
        """The budget left in the window with the least left, and the period of the window that
        binds: the used-up window that resets last when any is used up, else the one with the
        least left (ties: the first listed)."""
        if len(budgets) == 1:
            b = budgets[0]
            return b.limit - b.used, b.period
        left = min(b.limit - b.used for b in budgets)
        used_up = [b.period for b in budgets if b.limit <= b.used]
        if len(used_up) > 1:
            return left, max(used_up, key=lambda period: period_bounds(self.s.now, period)[1])
        if used_up:
            return left, used_up[0]
        return left, next(b.period for b in budgets if b.limit - b.used == left)

    def _chain(self, i: int, parent: list[int]) -> tuple[int, ...]:
        chain = [i]
        while parent[chain[-1]] >= 0:
            chain.append(parent[chain[-1]])
        return tuple(chain)

    def capped(self, pi: int, p: int) -> list[SpendCap]:
        """The reached spend caps that keep policy p's new work off pool pi."""
        shut = self.closed[pi]
        return [cap for ix, cap in shut if p in ix] if shut else []

    def _steps(self) -> list[tuple[int, int]]:
        """(pool, profile) visits: round r, pools in order, profiles in the pool's order."""
        s = self.s
        order = [{fid: j for j, fid in enumerate(p.profiles)} for p in s.pools]
        visits = []
        for fi, f in enumerate(s.profiles):
            if self.waiting_by_profile[fi]:
                for r, pid in enumerate(f.pools):
                    pi = self.pool_ix[pid]
                    j = order[pi].get(f.id)
                    if j is not None and self.enabled[pi]:
                        visits.append((r, pi, j, fi))
        visits.sort()
        return [(pi, fi) for _, pi, _, fi in visits]

    def run(self) -> None:
        self._budget_stops()
        self.occ_start = list(self.occ)
        self._fill_or_lend(FILL)
        stops = len(self.preemptions)
        self._reclaim_phase()
        if len(self.preemptions) > stops:
            self._fill_or_lend(FILL)
        self._fill_or_lend(LEND)

    # -- shared moves -------------------------------------------------------------------------

    def _queue(self, c: int) -> _Queue:
        q = self.queues.get(c)
        if q is None:
            f = self.s.profiles[self.cr_prof[c]]
            q = _Queue(
                self.s.waiting[self.cr_id[c]],
                None if f.size_from_task else f.size,
                self.stopping.setdefault(c, []),
            )
            self.queues[c] = q
        return q

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

    def _place(self, c: int, q: _Queue, i: int, t: WaitingTask, pi: int, phase: str) -> None:
        q.pop(i, t)
        self.version += 1
        p = self.cr_pol[c]
        self.occ[pi] += t.size
        U = self.U
        for j in self.chain[p]:
            U[j] += t.size
        w = self.weight[self.cr_prof[c]]
        if w:
            for j in self.bchain[p]:
                self.rw[j] += w
        self.placements.append(Placement(t.id, self.cr_id[c], self.s.pools[pi].id, phase))

    def _take(self, k: int, sign: int) -> None:
        """Remove (sign -1) or restore (sign +1) running task k's GPUs from its pool and policies."""
        size = self.run_size[k] * sign
        pi, q = self.run_pool[k], self.cr_pol[self.run_cr[k]]
        self.occ[pi] += size
        U = self.U
        for j in self.chain[q]:
            U[j] += size
        use = self.pool_use.get(pi)
        if use is not None:
            use[q] = use.get(q, 0) + size
        self.gone[k] = sign < 0
        self.version += 1

    def _preempt(self, k: int, reason: str, for_task: str | None, window: str | None = None) -> None:
        t = self.s.placed[k]
        c = self.run_cr[k]
        self._take(k, -1)
        w = self.weight[self.cr_prof[c]]
        if w:
            for j in self.bchain[self.cr_pol[c]]:
                self.rw[j] -= w
        if reason == RECLAIM:
            self.reclaimed[self.cr_pol[c]] += 1
        self.stopping.setdefault(c, []).append((t.seq, t.size))
        self.preemptions.append(Preemption(t.id, t.resource, t.pool, reason, for_task, window))

    # -- phases -------------------------------------------------------------------------------

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
                    if b < ms or not self._budget_ok(p, w):
                        break
                    if q is None:
                        q = self._queue(c)
                    i = q.peek(b)
                    if i < 0:
                        break
                    task = q.tasks[i]
                    room = cap[pi] - occ[pi]
                    if room < task.size:
                        reach = room + self._borrowed_on(pi)
                        if reach >= task.size:
                            reach = room + self._freeable(pi)
                        if reach < task.size:
                            continue
                    fits = room >= task.size and all(U[a] + task.size <= lim[a] for a in anc[p])
                    if fits or self._reclaim(p, task.size, pi, task.id, c):
                        self._place(c, q, i, task, pi, RECLAIM)
                        reach = None
                    else:
                        ceiling = task.size - 1

    # -- reclaim ------------------------------------------------------------------------------

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

    def _freeable(self, pi: int) -> int:
        """An upper bound on the room reclaim could free on pool pi: each borrowing policy's
        running GPUs there, at most its excess over its reservation. Cached until state changes."""
        got = self.freeable_at.get(pi)
        if got is not None and got[0] == self.version:
            return got[1]
        U, res = self.U, self.res
        bound = 0
        for q, use in self._pool_use(pi).items():
            if U[q] > res[q]:
                bound += min(use, U[q] - res[q])
        self.freeable_at[pi] = (self.version, bound)
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
        policy furthest above its reservation (recomputed as victims are taken), newest placed
        first, skipping work that would not help or would take its policy, or an ancestor not
        shared with the task's policy, below its reservation (a shared ancestor's GPUs stay in its
        subtree: a team takes back from its sibling what the sibling borrowed of its reservation,
        even while their department as a whole is below its own), and work that is protected
        (minimum runtime, preemption cap). When that fails only because of protected work, the
        compute resource c's tasks of size s are recorded as held (for their verdict).
        """
        key = (pi, p)
        failed = self.reclaim_failed.get(key)
        if failed is not None and failed[0] <= s:
            if failed[0] == s and failed[1] is not None:
                self.held.setdefault((c, s), failed[1])
            return False
        needed, skipped = self._select(p, s, pi, True)
        if needed is None:
            held = None
            if skipped:
                free, _ = self._select(p, s, pi, False)
                if free is not None:
                    held = self._protection(free, pi)
                    self.held.setdefault((c, s), held)
            self.reclaim_failed[key] = (s, held)
            return False
        for k in reversed(needed):
            self._preempt(k, RECLAIM, for_task)
        return True

    def _select(self, p: int, s: int, pi: int, honour: bool) -> tuple[list[int] | None, bool]:
        """The victims to preempt (newest last), or None when no choice makes room; state is left
        as it was. `honour`: skip protected work; the flag says whether any was skipped."""
        U, res = self.U, self.res
        ancestors = self.anc[p]
        needy = [a for a in ancestors if U[a] + s > self.lim[a]]
        lists: dict[int, list[int]] = {}
        if self.occ[pi] + s > self.cap[pi]:
            for q, ks in self._victims_on(pi).items():
                if U[q] > res[q]:
                    lists[q] = ks
        for a in needy:
            by_policy = self._victims_of()
            for q in self._subtree(a):
                if U[q] > res[q] and q in by_policy:
                    lists[q] = by_policy[q]
        if self.guarded:
            lists = {q: ks for q, ks in lists.items() if q not in self.never_victim}
        heap = [(res[q] - U[q], q) for q in lists]
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
            excess, q = heappop(heap)
            if excess != res[q] - U[q]:
                if U[q] > res[q]:
                    heappush(heap, (res[q] - U[q], q))
                continue
            guard = (took, skipped) if honour and self.guarded else None
            k = self._victim(q, lists[q], cursor, pi, s, self.chain[p], needy, guard)
            if k < 0:
                continue
            self._take(k, -1)
            taken.append(k)
            took[q] = took.get(q, 0) + 1
            if U[q] > res[q]:
                heappush(heap, (res[q] - U[q], q))
        needed = []
        for k in reversed(taken):
            self._take(k, +1)
            if not self._room(pi, s, ancestors):
                self._take(k, -1)
                needed.append(k)
        for k in needed:
            self._take(k, +1)
        return needed, skipped[0]

    def _guard(self, k: int, q: int, took: int) -> tuple[str, datetime] | None:
        """Why running task k of policy q may not be a reclaim victim now, and until when; None if
        it may. `took`: q's victims already taken in this attempt."""
        mr = self.min_run[self.cr_prof[self.run_cr[k]]]
        if mr is not None:
            until = self.s.placed[k].placed_at + mr
            if until > self.s.now:
                return MIN_RUNTIME, until
        left = self.cap_left[q]
        if left is not None:
            more = self.reclaimed[q] + took
            if more >= left:
                cap = self.s.policies[q].max_preemptions_per_hour
                recent = self.recent[q] + [self.s.now] * more
                return MAX_PREEMPTIONS, recent[len(recent) - cap] + HOUR
        return None

    def _protection(self, victims: list[int], pi: int) -> tuple[str, datetime, str]:
        """What protects the victims an unguarded reclaim would take: the cause whose protection
        lasts longest among them, until when, and the pool."""
        took: dict[int, int] = {}
        worst = None
        for k in victims:
            q = self.cr_pol[self.run_cr[k]]
            why = self._guard(k, q, took.get(q, 0))
            took[q] = took.get(q, 0) + 1
            if why is not None and (worst is None or why[1] > worst[1]):
                worst = why
        cause, until = worst
        return cause, until, self.s.pools[pi].id

    def _victim(self, q, ks, cursor, pi, s, inside, needy, guard=None) -> int:
        """q's newest running task that helps and keeps reservations whole, or -1. With `guard`
        (victims taken per policy, a flag to set), protected work is skipped and flagged."""
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
            keeps = U[q] - size >= res[q] and all(U[b] - size >= res[b] for b in chain if b not in inside)
            if helps and keeps:
                if guard is not None and self._guard(k, q, guard[0].get(q, 0)) is not None:
                    guard[1][0] = True
                    continue
                cursor[q] = i
                return k
        cursor[q] = i
        return -1
