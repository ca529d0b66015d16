"""The simulator's state: the scenario indexed by position, the virtual clock (with the "enabled clock"
that stops while the engine is disabled), each budget window's meter, and a task's life on it:
queued, started (on a cloud pool, once a node has room; its time limit's deadline then), stopped
(its running time kept for its time limit, and its limit left in its queue entry). Held tasks and
their release: `sim_deps`.
"""

from __future__ import annotations

import heapq
from bisect import insort
from dataclasses import replace
from datetime import datetime, timedelta
from operator import attrgetter

from .budget import US_PER_S, period_bounds, us_between
from .cloud import CloudPool
from .scenario_model import Change, Scenario, Submit
from .sessions import first_stop
from .sim_records import Account, Series, SimTask, kept_us
from .snapshot import HeldTask, PlacedTask, WaitingTask

GPU_US_PER_HOUR = 1000 * 3600 * US_PER_S
US_PER_HOUR = 3600 * US_PER_S
WAITING_KEY = attrgetter("key")


class SimState:
    def __init__(self, sc: Scenario, end_us: int, record: bool = False):
        self.sc = sc
        self.end_us = end_us
        self.step = sc.step_us
        self.pool_ix = {p.name: i for i, p in enumerate(sc.pools)}
        self.pol_ix = {p.name: i for i, p in enumerate(sc.policies)}
        self.cr_ix = {r.name: i for i, r in enumerate(sc.resources)}
        prof = {f.name: f for f in sc.profiles}
        self.prof_ix = {f.name: i for i, f in enumerate(sc.profiles)}
        self.cr_pol = [self.pol_ix[r.policy] for r in sc.resources]
        self.cr_weight = [prof[r.profile].time_weight for r in sc.resources]
        parent = [None if p.parent is None else self.pol_ix[p.parent] for p in sc.policies]
        self.chain = []
        for i in range(len(sc.policies)):
            chain = [i]
            while parent[chain[-1]] is not None:
                chain.append(parent[chain[-1]])
            self.chain.append(tuple(chain))

        self.capacity = [p.capacity for p in sc.pools]
        self.clouds = {i: CloudPool(p.name, p.cloud) for i, p in enumerate(sc.pools) if p.cloud is not None}
        self.reservation = [p.reservation for p in sc.policies]
        self.limit = [p.limit for p in sc.policies]
        self.accounts = {
            i: [Account(hours, period) for period, hours in p.budgets]
            for i, p in enumerate(sc.policies)
            if p.budgets
        }
        self.bchain = [tuple(j for j in c if j in self.accounts) for c in self.chain]
        # Money windows (issue 37), metered as time windows at each task's rate on its pool.
        self.spend = {
            i: [Account(limit, period, sc.prices[currency], currency) for period, limit, currency in p.money]
            for i, p in enumerate(sc.policies)
            if p.money
        }
        self.mchain = [tuple(j for j in c if j in self.spend) for c in self.chain]
        self.named_window = [
            any(len(self.accounts[j]) > 1 for j in b) or bool(m)
            for b, m in zip(self.bchain, self.mchain, strict=True)
        ]
        self.paid = [[0] * len(sc.pools) for _ in sc.policies] if sc.prices else None
        self.profile_pools = {f.name: [self.pool_ix[p] for p in f.pools] for f in sc.profiles}
        self.capped = {
            i: p.max_preemptions_per_hour
            for i, p in enumerate(sc.policies)
            if p.max_preemptions_per_hour is not None
        }
        self.reclaims: dict[int, list[int]] = {i: [] for i in self.capped}
        self.min_run_us = [f.min_runtime_s * US_PER_S for f in sc.profiles]
        self.cr_min_run = [self.min_run_us[self.prof_ix[r.profile]] for r in sc.resources]
        self.unguard: list[int] = []  # when a minimum runtime, a reclaim in the sliding hour or a wait ends
        starvation = [None if f.starvation_s is None else f.starvation_s * US_PER_S for f in sc.profiles]
        self.cr_starvation_us = [starvation[self.prof_ix[r.profile]] for r in sc.resources]

        self.tasks: dict[str, SimTask] = {}
        self.queues: list[list[WaitingTask]] = [[] for _ in sc.resources]
        self.queue_cache: dict[str, tuple[WaitingTask, ...]] = {}
        self.dirty_queues: set[int] = set(range(len(sc.resources)))
        self.placed: dict[str, PlacedTask] = {}
        self.completions: list[tuple[int, int, str]] = []
        self.tokens = 0
        self.seq = 0
        self.next_event = 0

        self.enabled = True
        self.disabled_since = 0
        self.disabled_total = 0
        self.pool_used = [0] * len(sc.pools)
        self.pool_area = [0] * len(sc.pools)
        self.capacity_area = [0] * len(sc.pools)
        self.pool_mark = 0
        self.gpu_us = [0] * len(sc.policies)
        self.charged = [0] * len(sc.policies)
        self.own_use = [0] * len(sc.policies)
        self.own_queued = [0] * len(sc.policies)
        self.series = Series() if record else None
        self.cancels: dict[str, list[int]] = {}
        # Issue 35: who runs after whom (task -> (dependant, after_ok)), the capped arrays, the held
        # tasks, the time limits' deadlines to wake at, and the ends counted (when any is used).
        self.dependants: dict[str, list[tuple[str, bool]]] = {}
        self.arrays: dict[str, int] = {}
        self.held: dict[str, SimTask] = {}
        self.held_cache: tuple[HeldTask, ...] | None = ()
        self.deadlines: list[int] = []
        used = False
        for e in sc.events:
            w = e.what
            if isinstance(w, Change) and w.kind == "cancel":
                self.cancels.setdefault(w.target, []).append(e.at_us)
            elif isinstance(w, Submit):
                for needed in w.after_ok:
                    self.dependants.setdefault(needed, []).append((w.id, True))
                for needed in w.after_any:
                    self.dependants.setdefault(needed, []).append((w.id, False))
                if w.max_running is not None:
                    self.arrays[w.array] = w.max_running
                used = used or bool(w.time_limit_us is not None or w.after_ok or w.after_any)
        self.ends = {"timed_out": 0, "dependency_failed": 0} if used else None
        # Issue 35: each pool's maintenance windows (the clock wakes at their starts and ends; a
        # snapshot has those not yet ended) and the loans not yet ended (their ends in time order).
        self.window_ends = sorted(w.end_us for p in sc.pools for w in p.maintenance)
        self.boundaries = sorted({x for p in sc.pools for w in p.maintenance for x in (w.start_us, w.end_us)})
        self.ended_windows = -1
        self.loan_ends: list[tuple[int, int, object]] = []
        self.lines: list[dict] = []

    # -- clock ----------------------------------------------------------------------------------

    def enabled_clock(self, t: int) -> int:
        """Microseconds up to t during which the engine was enabled."""
        if self.enabled:
            return t - self.disabled_total
        return self.disabled_since - self.disabled_total

    def at(self, t: int) -> datetime:
        return self.sc.start + timedelta(microseconds=t)

    def seconds(self, us: int) -> int | float:
        whole, frac = divmod(us, US_PER_S)
        return whole if not frac else us / US_PER_S

    def _windows(self):
        for windows in self.accounts.values():
            yield from windows
        for windows in self.spend.values():
            yield from windows

    def _roll_periods(self, t: int) -> None:
        for acc in self._windows():
            if t >= acc.end_us:
                start, end = period_bounds(self.at(t), acc.period)
                acc.start_us = us_between(self.sc.start, start)
                acc.end_us = us_between(self.sc.start, end)
                acc.e0 = self._enabled_at(max(acc.start_us, 0), t)
                acc.closed = 0
                acc.open_s = acc.open_w * acc.e0

    def _enabled_at(self, x: int, t: int) -> int:
        """The enabled clock at x, for x in (last step, t]: the engine's state did not change there."""
        return self.enabled_clock(t) - (t - x if self.enabled else 0)

    # -- a task's life --------------------------------------------------------------------------

    def _unqueue(self, task: SimTask, t: int) -> None:
        self.queues[task.cr].remove(task.waiting)
        self.dirty_queues.add(task.cr)
        task.wait_us += t - task.since_us
        self.own_queued[self.cr_pol[task.cr]] -= 1

    def _start(self, task: SimTask, pool: int, t: int) -> None:
        task.state = "running"
        task.pool = pool
        task.placed_us = t
        task.deadline_us = None
        task.e_start = self.enabled_clock(t)
        task.wait_us += t - task.since_us
        if self.cr_min_run[task.cr]:
            heapq.heappush(self.unguard, t + self.cr_min_run[task.cr])
        self.tokens += 1
        task.token = self.tokens  # a completion queued for an earlier placement no longer counts
        if pool in self.clouds:
            task.started_us = None
            self.clouds[pool].place(task.id, task.size)
        else:
            self._run(task, t)
        self._integrate(t)
        self.pool_used[pool] += task.size
        p = self.cr_pol[task.cr]
        self.own_use[p] += task.size
        self.own_queued[p] -= 1
        w = self.cr_weight[task.cr]
        for j in self.bchain[p]:
            for acc in self.accounts[j]:
                acc.open_w += w
                acc.open_s += w * max(task.e_start, acc.e0)
        for j in self.mchain[p]:
            for acc in self.spend[j]:
                rate = task.size * acc.rates.get(self.sc.pools[pool].name, 0)
                acc.open_w += rate
                acc.open_s += rate * max(task.e_start, acc.e0)

    def _run(self, task: SimTask, t: int) -> None:
        """The task runs from t (its placement, or when its cloud node had room): it completes
        `left_us` later; a session at its first stop."""
        task.started_us = t
        if task.limit_us is not None:
            task.deadline_us = t + task.limit_us - task.ran_us
            heapq.heappush(self.deadlines, task.deadline_us)
        left = task.left_us
        if task.session is not None:
            stop = first_stop(task.session.activity, task.left_us, task.session.limits)
            if stop is None:
                return
            left, task.session.stop = stop
        heapq.heappush(self.completions, (t + left, task.token, task.id))

    def _stop(self, task: SimTask, end_us: int, state: str) -> None:
        """Close the task's usage interval at end_us."""
        del self.placed[task.id]
        if task.pool in self.clouds:
            self.clouds[task.pool].stop(task.id, task.size, end_us)
        self._integrate(end_us)
        self.pool_used[task.pool] -= task.size
        p = self.cr_pol[task.cr]
        self.own_use[p] -= task.size
        w = self.cr_weight[task.cr]
        e_end = self.enabled_clock(end_us)
        task.gpu_us += task.size * (end_us - task.placed_us)
        if task.started_us is not None:
            task.ran_us += end_us - task.started_us
        for j in self.chain[p]:
            self.gpu_us[j] += task.size * (end_us - task.placed_us)
            self.charged[j] += w * (e_end - task.e_start)
        for j in self.bchain[p]:
            for acc in self.accounts[j]:
                begin = max(task.e_start, acc.e0)
                acc.open_w -= w
                acc.open_s -= w * begin
                acc.closed += w * max(0, e_end - begin)
        for j in self.mchain[p]:
            for acc in self.spend[j]:
                rate = task.size * acc.rates.get(self.sc.pools[task.pool].name, 0)
                begin = max(task.e_start, acc.e0)
                acc.open_w -= rate
                acc.open_s -= rate * begin
                acc.closed += rate * max(0, e_end - begin)
        if self.paid is not None:
            for j in self.chain[p]:
                self.paid[j][task.pool] += task.size * (end_us - task.placed_us)
        task.state = state
        if task.session is not None:
            task.session.ended_us = end_us
        if state == "waiting":
            task.preemptions += 1
            if task.session is not None:
                task.state = "canceled"  # a session is never requeued: preempted, it ends
                return
            if not task.checkpoint:
                task.left_us = task.duration_us
            else:
                task.left_us -= kept_us(task, end_us)
            task.since_us = end_us
            if task.limit_us is not None:  # the time limit it has left, whole seconds rounded up
                left_s = -(-(task.limit_us - task.ran_us) // US_PER_S)
                task.waiting = replace(task.waiting, limit_s=max(0, left_s))
            self._enqueue(task)
            self.own_queued[p] += 1

    def _enqueue(self, task: SimTask) -> None:
        """Into its queue by key: higher priority first, then seq (a requeued task keeps both)."""
        queue = self.queues[task.cr]
        if not queue or queue[-1].key < task.waiting.key:
            queue.append(task.waiting)
        else:
            insort(queue, task.waiting, key=WAITING_KEY)
        self.dirty_queues.add(task.cr)

    def _integrate(self, t: int) -> None:
        dt = t - self.pool_mark
        if dt > 0:
            for i, used in enumerate(self.pool_used):
                self.pool_area[i] += used * dt
                self.capacity_area[i] += self.capacity[i] * dt
            self.pool_mark = t
