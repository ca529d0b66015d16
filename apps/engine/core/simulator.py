"""The simulator (DESIGN section 5): the engine core on a virtual clock, with no database.

`python -m apps.engine.core.simulator SCENARIO.json [--until S] [--summary-only] [--report F]`

The clock advances in steps of `pass_interval_s`, kept in integer microseconds. At each step:
budget periods that ended roll over, completions due are applied, then the events due, then a
pass runs (unless the engine is disabled), then each cloud pool's autoscaler step (`cloud.py`).
Steps at which nothing can change (no event, completion, period end, budget running out, node up
or idle deadline, and the last pass decided nothing) are skipped: a pass there would decide
nothing, so the output is the same as running every step.

Budgets are metered from usage intervals: per window of each budgeted policy, the closed
intervals' charge in the window's current period plus, for the running ones, weight x enabled
time since max(start, period start), using an "enabled clock" that stops while the engine is
disabled. Tasks complete at the exact moment `duration_s` after they start (at placement; on a
cloud pool, when a node has room), charged from placement until then; the engine sees it at the
next step, and the output reports that step's time. A submit larger than every pool of its
profile's list (at their capacity then) is rejected, not queued. Reclaim times of policies with
a preemption cap are kept for the sliding hour. A session (`sessions.py`) is scheduled the same
way at its first stop: its duration, or the moment an idle limit fires, from its activity
profile; it is never requeued.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
from bisect import insort
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from .allocator import allocate
from .budget import UNITS_PER_HOUR, US_PER_S, period_bounds, us_between
from .cloud import CloudPool
from .decisions import Decisions
from .scenario import Change, IdleLimitsSpec, Scenario, ScenarioError, Submit, loads
from .sessions import Tally, first_stop, freed_until
from .snapshot import Budget, ComputeResource, PlacedTask, Policy, Pool, Profile, Snapshot, WaitingTask

GPU_US_PER_HOUR = 1000 * 3600 * US_PER_S
US_PER_HOUR = 3600 * US_PER_S


@dataclass(slots=True)
class _Task:
    id: str
    cr: int
    size: int
    duration_us: int | None
    checkpoint: bool
    seq: int
    waiting: WaitingTask
    state: str = "waiting"
    left_us: int | None = 0
    since_us: int = 0
    wait_us: int = 0
    preemptions: int = 0
    pool: int = -1
    placed_us: int = 0
    started_us: int | None = None
    e_start: int = 0
    token: int = 0
    gpu_us: int = 0
    session: _Session | None = None


@dataclass(slots=True)
class _Session:
    """A session's profile and, once it ended, why: `reason` (idle, reclaim, budget) and the idle
    `limit` that fired; `stop` is what its scheduled stop will be (completed, idle or lifetime)."""

    activity: tuple[tuple[int, bool], ...]
    limits: IdleLimitsSpec
    stop: str = "completed"
    reason: str | None = None
    limit: str | None = None
    ended_us: int = 0


@dataclass(slots=True)
class _Account:
    """One time budget window's meter for its current period, in budget units."""

    limit: int
    period: str
    start_us: int = 0
    end_us: int = 0
    e0: int = 0
    closed: int = 0
    open_w: int = 0
    open_s: int = 0

    def used(self, e_now: int) -> int:
        return self.closed + self.open_w * e_now - self.open_s


@dataclass
class _Series:
    """What the report draws, recorded at each step where something changed."""

    times: list[float] = field(default_factory=list)
    policy_use: list[list[int]] = field(default_factory=list)
    pool_use: list[list[int]] = field(default_factory=list)
    queued: list[list[int]] = field(default_factory=list)
    capacity: list[list[int]] = field(default_factory=list)


class Simulation:
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
            i: [_Account(hours, period) for period, hours in p.budgets]
            for i, p in enumerate(sc.policies)
            if p.budgets
        }
        self.bchain = [tuple(j for j in c if j in self.accounts) for c in self.chain]
        self.named_window = [any(len(self.accounts[j]) > 1 for j in b) for b in self.bchain]
        self.profiles = tuple(
            Profile(
                f.name,
                f.size,
                f.pools,
                sc.queuing_order[f.name],
                f.time_weight,
                f.size_from_task,
                f.min_runtime_s,
            )
            for f in sc.profiles
        )
        self.profile_pools = {f.name: [self.pool_ix[p] for p in f.pools] for f in sc.profiles}
        self.capped = {
            i: p.max_preemptions_per_hour
            for i, p in enumerate(sc.policies)
            if p.max_preemptions_per_hour is not None
        }
        self.reclaims: dict[int, list[int]] = {i: [] for i in self.capped}
        self.min_run_us = [f.min_runtime_s * US_PER_S for f in sc.profiles]
        self.cr_min_run = [self.min_run_us[self.prof_ix[r.profile]] for r in sc.resources]
        self.unguard: list[int] = []  # when a minimum runtime or a reclaim in the sliding hour ends
        self.resources = tuple(ComputeResource(r.name, r.policy, r.profile) for r in sc.resources)
        self._pools()
        self._policies = [self._policy(i) for i in range(len(sc.policies))]

        self.tasks: dict[str, _Task] = {}
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
        self.series = _Series() if record else None
        self.cancels: dict[str, list[int]] = {}
        for e in sc.events:
            if isinstance(e.what, Change) and e.what.kind == "cancel":
                self.cancels.setdefault(e.what.target, []).append(e.at_us)
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

    def run(self):
        """Yield output lines in time order; the summary line last."""
        t = 0
        while t <= self.end_us:
            self._roll_periods(t)
            changed = self._complete(t)
            changed |= self._apply_events(t)
            decided = False
            if self.enabled:
                decided = self._pass(t)
            if self.clouds:
                changed |= self._autoscale(t)
            if self.series is not None and (changed or decided or t == 0):
                self._record(t)
            yield from self.lines
            self.lines.clear()
            t = t + self.step if decided else self._wake(t)
        if self.series is not None:
            self._record(self.end_us)
        yield {"summary": self._summary()}

    def _wake(self, t: int) -> int:
        """The next step at which a pass could decide anything (past the end if none)."""
        due = []
        if self.next_event < len(self.sc.events):
            due.append(self.sc.events[self.next_event].at_us)
        if self.completions:
            due.append(self.completions[0][0])
        if self.enabled:
            e_now = self.enabled_clock(t)
            for acc in self._windows():
                due.append(acc.end_us)
                left = acc.limit - acc.used(e_now)
                if acc.open_w and left > 0:
                    due.append(t - (-left // acc.open_w))
        for cloud in self.clouds.values():
            at = cloud.due()
            if at is not None:
                due.append(at)
        while self.unguard and self.unguard[0] <= t:
            heapq.heappop(self.unguard)
        if self.unguard:
            due.append(self.unguard[0])
        if not due:
            return self.end_us + self.step
        nxt = max(min(due), t + self.step)
        return -(-nxt // self.step) * self.step

    def _windows(self):
        for windows in self.accounts.values():
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

    # -- changes --------------------------------------------------------------------------------

    def _complete(self, t: int) -> bool:
        changed = False
        while self.completions and self.completions[0][0] <= t:
            end_us, token, task_id = heapq.heappop(self.completions)
            task = self.tasks[task_id]
            if task.state != "running" or task.token != token:
                continue
            changed = True
            if task.session is not None and task.session.stop != "completed":
                limit = task.session.stop
                task.session.reason, task.session.limit = "idle", limit
                self._stop(task, end_us, "canceled")
                self.lines.append(
                    {
                        "at": self.seconds(t),
                        "task": task.id,
                        "event": "stopped",
                        "reason": "idle",
                        "limit": limit,
                    }
                )
                continue
            self._stop(task, end_us, "completed")
            self.lines.append({"at": self.seconds(t), "task": task.id, "event": "completed"})
        return changed

    def _apply_events(self, t: int) -> bool:
        events = self.sc.events
        changed = False
        while self.next_event < len(events) and events[self.next_event].at_us <= t:
            what = events[self.next_event].what
            self.next_event += 1
            changed = True
            if isinstance(what, Submit):
                self._submit(what, t)
            else:
                self._change(what, t)
        return changed

    def _submit(self, s: Submit, t: int) -> None:
        profile = self.sc.resources[self.cr_ix[s.resource]].profile
        if s.size > max((self.capacity[i] for i in self.profile_pools[profile]), default=0):
            self.tasks[s.id] = _Task(
                s.id, self.cr_ix[s.resource], s.size, s.duration_us, s.checkpoint, 0, None, "rejected"
            )
            self.lines.append(
                {"at": self.seconds(t), "task": s.id, "event": "rejected", "reason": "never_fits"}
            )
            return
        self.seq += 1
        task = _Task(
            s.id,
            self.cr_ix[s.resource],
            s.size,
            s.duration_us,
            s.checkpoint,
            self.seq,
            WaitingTask(s.id, self.seq, s.size),
        )
        task.left_us = s.duration_us
        task.since_us = t
        if s.kind == "session":
            task.session = _Session(s.activity, self.sc.resources[task.cr].idle_limits)
        self.tasks[s.id] = task
        self.queues[task.cr].append(task.waiting)
        self.dirty_queues.add(task.cr)
        self.own_queued[self.cr_pol[task.cr]] += 1

    def _change(self, c: Change, t: int) -> None:
        if c.kind == "cancel":
            task = self.tasks[c.target]
            if task.state == "running":
                self._stop(task, t, "canceled")
            elif task.state == "waiting":
                self._unqueue(task, t)
                task.state = "canceled"
            else:
                return
            self.lines.append({"at": self.seconds(t), "task": task.id, "event": "canceled"})
        elif c.kind == "engine":
            if c.value and not self.enabled:
                self.disabled_total += t - self.disabled_since
                self.enabled = True
            elif not c.value and self.enabled:
                self.disabled_since = t
                self.enabled = False
        elif c.kind == "set_capacity":
            self._integrate(t)
            self.capacity[self.pool_ix[c.target]] = c.value
            self._pools()
        else:
            i = self.pol_ix[c.target]
            if c.kind == "set_budget":
                next(acc for acc in self.accounts[i] if acc.period == c.period).limit = c.value
            elif c.kind == "set_reservation":
                self.reservation[i] = c.value
            else:
                self.limit[i] = c.value
            self._policies[i] = self._policy(i)

    def _unqueue(self, task: _Task, t: int) -> None:
        self.queues[task.cr].remove(task.waiting)
        self.dirty_queues.add(task.cr)
        task.wait_us += t - task.since_us
        self.own_queued[self.cr_pol[task.cr]] -= 1

    def _start(self, task: _Task, pool: int, t: int) -> None:
        task.state = "running"
        task.pool = pool
        task.placed_us = t
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

    def _run(self, task: _Task, t: int) -> None:
        """The task runs from t (its placement, or when its cloud node had room): it completes
        `left_us` later; a session at its first stop."""
        task.started_us = t
        left = task.left_us
        if task.session is not None:
            stop = first_stop(task.session.activity, task.left_us, task.session.limits)
            if stop is None:
                return
            left, task.session.stop = stop
        heapq.heappush(self.completions, (t + left, task.token, task.id))

    def _stop(self, task: _Task, end_us: int, state: str) -> None:
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
        for j in self.chain[p]:
            self.gpu_us[j] += task.size * (end_us - task.placed_us)
            self.charged[j] += w * (e_end - task.e_start)
        for j in self.bchain[p]:
            for acc in self.accounts[j]:
                begin = max(task.e_start, acc.e0)
                acc.open_w -= w
                acc.open_s -= w * begin
                acc.closed += w * max(0, e_end - begin)
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
            elif task.started_us is not None:
                task.left_us -= end_us - task.started_us
            task.since_us = end_us
            insort(self.queues[task.cr], task.waiting, key=lambda w: w.seq)
            self.dirty_queues.add(task.cr)
            self.own_queued[p] += 1

    def _integrate(self, t: int) -> None:
        dt = t - self.pool_mark
        if dt > 0:
            for i, used in enumerate(self.pool_used):
                self.pool_area[i] += used * dt
                self.capacity_area[i] += self.capacity[i] * dt
            self.pool_mark = t

    # -- the pass -------------------------------------------------------------------------------

    def _pools(self) -> None:
        sc = self.sc
        self.pools = tuple(
            Pool(p.name, self.capacity[i], sc.execution_order[p.name]) for i, p in enumerate(sc.pools)
        )

    def _policy(self, i: int, e_now: int | None = None, t: int = 0) -> Policy:
        """Policy i; with `e_now` (the enabled clock), its budget use and recent reclaims at t."""
        p = self.sc.policies[i]
        budgets = tuple(
            Budget(acc.limit, acc.period, 0 if e_now is None else acc.used(e_now))
            for acc in self.accounts.get(i, ())
        )
        reclaims = ()
        if i in self.capped:
            times = self.reclaims[i]
            while times and times[0] <= t - US_PER_HOUR:
                times.pop(0)
            reclaims = tuple(self.at(x) for x in times)
        cap = p.max_preemptions_per_hour
        return Policy(p.name, self.reservation[i], self.limit[i], p.parent, budgets, cap, reclaims)

    def snapshot(self, t: int) -> Snapshot:
        for c in self.dirty_queues:
            self.queue_cache[self.resources[c].id] = tuple(self.queues[c])
        self.dirty_queues.clear()
        e_now = self.enabled_clock(t)
        policies = list(self._policies)
        for i in self.accounts.keys() | self.capped.keys():
            policies[i] = self._policy(i, e_now, t)
        return Snapshot(
            self.at(t),
            self.pools,
            self.profiles,
            tuple(policies),
            self.resources,
            self.queue_cache,
            tuple(self.placed.values()),
            self.sc.low_watermark_s,
        )

    def _pass(self, t: int) -> bool:
        decisions = allocate(self.snapshot(t))
        self.apply(decisions, t)
        return bool(decisions.placements or decisions.preemptions)

    def apply(self, d: Decisions, t: int) -> None:
        at = self.seconds(t)
        for pre in d.preemptions:
            task = self.tasks[pre.task]
            if task.session is not None:
                task.session.reason = pre.reason
            self._stop(task, t, "waiting")
            line = {"at": at, "task": task.id, "event": "preempted", "reason": pre.reason}
            if pre.window is not None and self.named_window[self.cr_pol[task.cr]]:
                line["window"] = pre.window
            self.lines.append(line)
            if pre.reason == "reclaim" and self.cr_pol[task.cr] in self.capped:
                self.reclaims[self.cr_pol[task.cr]].append(t)
                heapq.heappush(self.unguard, t + US_PER_HOUR)
        started = []
        for pl in d.placements:
            task = self.tasks[pl.task]
            started.append(task)
            self._start(task, self.pool_ix[pl.pool], t)
            self.lines.append({"at": at, "task": task.id, "event": "placed", "pool": pl.pool})
        gone_by_cr: dict[int, set[str]] = {}
        for task in started:
            gone_by_cr.setdefault(task.cr, set()).add(task.id)
        for c, gone in gone_by_cr.items():
            self.queues[c] = [w for w in self.queues[c] if w.id not in gone]
            self.dirty_queues.add(c)
        now = self.at(t)
        for task in sorted(started, key=lambda x: x.seq):
            r = self.resources[task.cr]
            self.placed[task.id] = PlacedTask(
                task.id, r.id, self.sc.pools[task.pool].name, task.size, task.seq, now
            )

    def _autoscale(self, t: int) -> bool:
        """Each cloud pool's autoscaler step after the pass: tasks whose node has room start."""
        changed = False
        at = self.seconds(t)
        for i, cloud in self.clouds.items():
            started, events = cloud.step(t, self.pool_used[i])
            for task_id in started:
                self._run(self.tasks[task_id], t)
            self.lines.extend({"at": at} | e for e in events)
            changed |= bool(started or events)
        return changed

    # -- output ---------------------------------------------------------------------------------

    def _record(self, t: int) -> None:
        s = self.series
        s.times.append(t / US_PER_S)
        s.policy_use.append(list(self.own_use))
        s.pool_use.append(list(self.pool_used))
        s.queued.append(list(self.own_queued))
        s.capacity.append(list(self.capacity))

    def _summary(self) -> dict:
        end = self.end_us
        gpu_us = list(self.gpu_us)
        charged = list(self.charged)
        e_end = self.enabled_clock(end)
        for task in self.tasks.values():
            if task.state == "running":
                for j in self.chain[self.cr_pol[task.cr]]:
                    gpu_us[j] += task.size * (end - task.placed_us)
                    charged[j] += self.cr_weight[task.cr] * (e_end - task.e_start)
        self._integrate(end)
        pools = {
            p.name: {
                "utilization": round(self.pool_area[i] / self.capacity_area[i], 6)
                if self.capacity_area[i]
                else 0
            }
            for i, p in enumerate(self.sc.pools)
        }
        for i, cloud in self.clouds.items():
            pools[self.sc.pools[i].name].update(cloud.summary(end, US_PER_HOUR))
        return {
            "policies": {
                p.name: {
                    "gpu_hours": round(gpu_us[i] / GPU_US_PER_HOUR, 6),
                    "budget_hours": round(charged[i] / UNITS_PER_HOUR, 6),
                }
                for i, p in enumerate(self.sc.policies)
            },
            "tasks": {task.id: self._task_line(task, end) for task in self.tasks.values()},
            "pools": pools,
        } | self._sessions_summary(end)

    def _task_line(self, task: _Task, end: int) -> dict:
        line = {
            "state": "placed" if task.state == "running" and task.started_us is None else task.state,
            "preemptions": task.preemptions,
            "wait_s": self.seconds(task.wait_us + (end - task.since_us if task.state == "waiting" else 0)),
        }
        if task.session is not None:
            line["kind"] = "session"
            if task.session.reason is not None:
                line["reason"] = task.session.reason
            if task.session.limit is not None:
                line["limit"] = task.session.limit
        return line

    def _sessions_summary(self, end: int) -> dict:
        """Only when the scenario has sessions: their GPU-hours and what the idle limits freed, per
        compute resource that ran any and overall."""
        per: dict[int, Tally] = {}
        for task in self.tasks.values():
            s = task.session
            if s is None:
                continue
            tally = per.setdefault(task.cr, Tally())
            tally.sessions += 1
            tally.gpu_us += task.gpu_us
            if task.state == "running":
                tally.gpu_us += task.size * (end - task.placed_us)
            if s.limit is not None:
                tally.stopped[s.limit] += 1
                until = freed_until(
                    s.ended_us, task.started_us, task.duration_us, self.cancels.get(task.id, []), end
                )
                tally.freed_gpu_us += task.size * (until - s.ended_us)
        if not per:
            return {}
        total = Tally()
        for tally in per.values():
            total.add(tally)
        return {
            "sessions": total.line(GPU_US_PER_HOUR)
            | {
                "compute_resources": {
                    self.sc.resources[c].name: per[c].line(GPU_US_PER_HOUR) for c in sorted(per)
                }
            }
        }


def main(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    """Run a scenario; JSON lines on stdout. Returns 0, or 2 for bad input or arguments."""
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    parser = _Parser(prog="simulate", description="Run the engine core on a scenario.")
    parser.add_argument("scenario", help="scenario JSON file, or - for stdin")
    parser.add_argument("--until", type=str, metavar="SECONDS", help="stop the clock at SECONDS")
    parser.add_argument("--summary-only", action="store_true", help="print only the summary line")
    parser.add_argument("--report", metavar="FILE.html", help="write a self-contained plotly report")
    try:
        args = parser.parse_args(argv)
    except _ArgumentError as e:
        print(f"simulate: {e}", file=stderr)
        return 2
    except SystemExit as e:
        return 2 if e.code else 0
    try:
        text = sys.stdin.read() if args.scenario == "-" else _read(args.scenario)
        sc = loads(text)
        end_us = sc.duration_us
        if args.until is not None:
            end_us = min(end_us, _until(args.until))
        if args.report:
            _check_writable(args.report)
    except ScenarioError as e:
        print(f"simulate: {e}", file=stderr)
        return 2
    sim = Simulation(sc, end_us, record=args.report is not None)
    for line in sim.run():
        if not args.summary_only or "summary" in line:
            stdout.write(json.dumps(line) + "\n")
    if args.report:
        from .report import write_report

        try:
            write_report(sim, args.report)
        except OSError as e:
            print(f"simulate: --report: {args.report}: {e.strerror}", file=stderr)
            return 2
    return 0


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """Bad arguments are one line on stderr and exit 2, like bad input (not usage plus error)."""

    def error(self, message):
        raise _ArgumentError(message)


def _check_writable(path: str) -> None:
    """Refuse a report path that cannot be written before spending the run on it."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ScenarioError(f"--report: {path} is a directory")
    if not os.path.isdir(folder):
        raise ScenarioError(f"--report: {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise ScenarioError(f"--report: {folder} is not writable")


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise ScenarioError(f"{path}: {e.strerror}") from None
    except UnicodeDecodeError:
        raise ScenarioError(f"{path}: not UTF-8 text") from None


def _until(text: str) -> int:
    from decimal import Decimal, InvalidOperation

    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ScenarioError(f"--until: {text!r} is not a number of seconds") from None
    us = value * US_PER_S
    if not value.is_finite() or value < 0 or us != us.to_integral_value():
        raise ScenarioError("--until: must be >= 0 and a multiple of 1 microsecond")
    return int(us)


if __name__ == "__main__":
    sys.exit(main())
