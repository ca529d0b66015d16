"""The state of one pass: the snapshot indexed into lists by position, and the bookkeeping that
placing or stopping work does on it. The phases build on it (`pass_budgets`, `pass_fill`,
`pass_guards`, `pass_reclaim`, in `allocator`); the verdicts read its final state.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from .budget import US_PER_S, period_bounds
from .decisions import Placement, Preemption
from .pass_queue import ArrayQueue, TaskQueue, WindowQueue, fits
from .snapshot import Maintenance, Snapshot, SpendCap, WaitingTask

FILL, RECLAIM, LEND, TIME_LIMIT, MAINTENANCE = "fill", "reclaim", "lend", "time_limit", "maintenance"
HOUR = timedelta(hours=1)
MICROSECOND = timedelta(microseconds=1)
LONGEST_FIRST = {"month": 0, "week": 1, "day": 2}  # a policy's money windows, in slot order
FRONT = -(2**62)  # a maintenance stop's queue key: before every waiting task of its priority


class PassState:
    """The state of one pass, in lists indexed by position in the snapshot."""

    def __init__(self, s: Snapshot):
        self.s = s
        self.lw = s.low_watermark_s * US_PER_S
        pools, profiles, policies, resources = s.pools, s.profiles, s.policies, s.resources

        self.pool_ix = pool_ix = {p.id: i for i, p in enumerate(pools)}
        self.cap = [p.capacity for p in pools]
        self.enabled = [p.enabled for p in pools]
        self.occ = occ = [0] * len(pools)
        # Maintenance windows, at no cost unless a pool has one: `down` the pools in maintenance now
        # (capacity 0 for the pass: their work is stopped, nothing placed), `gaps` each pool's
        # microseconds to its next window ahead (None: none; the list is None when no pool has one),
        # `windowed` per profile whether it lists such a pool, `windows` the window concerned.
        self.down: set[int] = set()
        self.gaps: list[int | None] | None = None
        self.windowed: list[bool] = []
        self.windows: dict[int, Maintenance] = {}
        if any(p.maintenance for p in pools):
            self._maintenance(s)

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
        # Money windows (`pass_money`), at no cost unless a policy has one.
        self.money = False
        self.mchain: list[tuple[int, ...]] = []
        self.mrem: list[int] = []
        self.mrw: list[int] = []
        self.mrate: list[list[int]] = []
        self.mwindow: dict[int, str] = {}
        self.mbudget: list = []
        self.mowner: list[int] = []
        for i, p in enumerate(policies):
            if p.budgets:
                time = p.budgets
                if any(b.rates is not None for b in time):
                    self.money = True
                    time = tuple(b for b in time if b.rates is None)
                if time:
                    self.rem[i], self.window[i] = self._binding(time)
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
        self.gone = gone = bytearray([t.preempting for t in placed])
        deadlines = [t.deadline for t in placed]
        self.timed = deadlines.count(None) != len(deadlines)  # some placed work has a time limit
        self.stopping: dict[int, list[tuple[tuple[int, int], int]]] = {}
        use = [0] * len(resources)
        count = [0] * len(resources)
        for k, (c, pi, size, stopping) in enumerate(zip(run_cr, run_pool, run_size, gone, strict=True)):
            if stopping:
                t = placed[k]
                if t.deadline is None or t.deadline > s.now:  # stopped at its limit: it does not return
                    self.stopping.setdefault(c, []).append(((-t.priority, t.seq), size))
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
        if self.money:
            self._money_state()

        self.waiting_by_profile: list[list[int]] = [[] for _ in profiles]
        for rid, queue in s.waiting.items():
            if queue:
                c = cr_ix[rid]
                self.waiting_by_profile[self.cr_prof[c]].append(c)
        self.active: dict[int, list[int]] = {}
        self.steps = self._steps()

        # Arrays' caps (`Snapshot.arrays`): each capped array's room left, at no cost unless used.
        self.array_left: dict[str, int] = {}
        if s.arrays:
            self.array_left = dict(s.arrays)
            for t in placed:
                if t.array is not None and not t.preempting and t.array in self.array_left:
                    self.array_left[t.array] -= 1

        self.queues: dict[int, TaskQueue] = {}
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

        # Fair sharing, lending limits and the starvation guard: each off, at no cost, unless used.
        self.fair_parents = [i for i, p in enumerate(policies) if p.lending == "fair" and self.children[i]]
        self.fair_top: list[int] = self.lim
        self.share: dict[int, int] = {}
        self.lendable = [p.lendable for p in policies]
        self.keeps = [
            i for i, p in enumerate(policies) if p.lendable is not None and p.lendable < p.reservation
        ]
        self.hold: dict[int, str] = {}
        # Fair reclaim's per-pass indexes and memos (`pass_fair`, `pass_fair_index`), built on first use.
        self.fair_members: dict[int, list[int]] | None = None
        self.fair_at: dict[int, tuple] = {}
        self.fair_failed: dict[tuple[int, int, bool], tuple[int, int]] = {}
        self.over_at: dict[int, set[int]] = {}
        self.excess_at: dict[int, tuple[tuple[int, int], int]] = {}
        self.excess_of: dict[int, tuple] = {}

    def _maintenance(self, s: Snapshot) -> None:
        gaps: list[int | None] = [None] * len(s.pools)
        for pi, p in enumerate(s.pools):
            w = next((w for w in p.maintenance if w.end > s.now), None)
            if w is None:
                continue
            self.windows[pi] = w
            if w.start <= s.now:
                self.down.add(pi)
                self.cap[pi] = 0
            else:
                gaps[pi] = (w.start - s.now) // MICROSECOND
        if any(g is not None for g in gaps):
            self.gaps = gaps
            self.windowed = [any(gaps[self.pool_ix[pid]] is not None for pid in f.pools) for f in s.profiles]

    def _money_state(self) -> None:
        """The money slots of the snapshot's policies (`pass_money`), with the rate of the work
        placed now."""
        s = self.s
        slots = []
        for i, p in enumerate(s.policies):
            if p.budgets:
                own = [b for b in p.budgets if b.rates is not None]
                if len(own) > 1:
                    own.sort(key=lambda b: LONGEST_FIRST[b.period])
                slots.extend((i, b) for b in own)
        self.mowner = [i for i, _ in slots]
        self.mbudget = [b for _, b in slots]
        self.mrem = [b.limit - b.used for _, b in slots]
        by_rates: dict[int, list[int]] = {}  # windows of one currency usually share their rates
        for _, b in slots:
            if id(b.rates) not in by_rates:
                by_rates[id(b.rates)] = [b.rates.get(pool.id, 0) for pool in s.pools]
        self.mrate = [by_rates[id(b.rates)] for _, b in slots]
        self.mrw = [0] * len(slots)
        own_slots: dict[int, list[int]] = {}
        for m, (i, _) in enumerate(slots):
            own_slots.setdefault(i, []).append(m)
        self.mchain = mchain = [tuple(m for j in chain for m in own_slots.get(j, ())) for chain in self.chain]
        held: dict[tuple[int, int], int] = {}  # (policy, pool) -> milli-GPUs running
        cr_pol = self.cr_pol
        for c, pi, size, stopping in zip(self.run_cr, self.run_pool, self.run_size, self.gone, strict=True):
            if not stopping and mchain[cr_pol[c]]:
                key = (cr_pol[c], pi)
                held[key] = held.get(key, 0) + size
        for (p, pi), size in held.items():
            self._spend(p, pi, size)

    def _spend(self, p: int, pi: int, size: int) -> None:
        """Add (size > 0) or remove (size < 0) work of policy p on pool pi to its money slots' rates."""
        mrw, mrate = self.mrw, self.mrate
        for m in self.mchain[p]:
            mrw[m] += size * mrate[m][pi]

    def admits(self, pi: int, t: WaitingTask, fi: int) -> bool:
        """Whether pool pi's next maintenance window lets task t (of profile fi) start now."""
        gap = None if self.gaps is None else self.gaps[pi]
        return gap is None or fits(t, gap, self.s.profiles[fi].unlimited_before_maintenance)

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

    def free_gpus(self) -> int:
        """Free GPUs over the estate's enabled pools now."""
        return sum(c - o for c, o, on in zip(self.cap, self.occ, self.enabled, strict=True) if on)

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
                    if j is not None and self.enabled[pi] and pi not in self.down:
                        visits.append((r, pi, j, fi))
        visits.sort()
        return [(pi, fi) for _, pi, _, fi in visits]

    def _queue(self, c: int) -> TaskQueue:
        q = self.queues.get(c)
        if q is None:
            f = self.s.profiles[self.cr_prof[c]]
            tasks, fixed = self.s.waiting[self.cr_id[c]], None if f.size_from_task else f.size
            stopping = self.stopping.setdefault(c, [])
            if self.gaps is not None and self.windowed[self.cr_prof[c]]:
                unlimited = f.unlimited_before_maintenance
                q = WindowQueue(tasks, fixed, stopping, self.array_left, self.gaps, unlimited)
            elif self.array_left:
                q = ArrayQueue(tasks, fixed, stopping, self.array_left)
            else:
                q = TaskQueue(tasks, fixed, stopping)
            self.queues[c] = q
        return q

    def _place(self, c: int, q: TaskQueue, i: int, t: WaitingTask, pi: int, phase: str) -> None:
        q.pop(i, t)
        self.version += 1
        if self.hold:
            self.hold = {h: tid for h, tid in self.hold.items() if tid != t.id}
        p = self.cr_pol[c]
        self.occ[pi] += t.size
        if self.array_left and t.array in self.array_left:
            self.array_left[t.array] -= 1
        U = self.U
        for j in self.chain[p]:
            U[j] += t.size
        w = self.weight[self.cr_prof[c]]
        if w:
            for j in self.bchain[p]:
                self.rw[j] += w
        if self.money:
            self._spend(p, pi, t.size)
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
        if self.money:
            self._spend(self.cr_pol[c], self.run_pool[k], -self.run_size[k])
        if reason in (RECLAIM, "fair_share"):  # both count against max_preemptions_per_hour
            self.reclaimed[self.cr_pol[c]] += 1
        if self.array_left and reason in (TIME_LIMIT, MAINTENANCE, "budget") and t.array in self.array_left:
            self.array_left[t.array] += 1  # before any placement; later stops free it next pass
        if reason != TIME_LIMIT:  # work stopped at its time limit ends: it does not return
            key = (-t.priority, FRONT + t.seq if reason == MAINTENANCE else t.seq)
            self.stopping.setdefault(c, []).append((key, t.size))
        self.preemptions.append(Preemption(t.id, t.resource, t.pool, reason, for_task, window))
