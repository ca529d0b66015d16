"""Each step's pass in the simulator: the snapshot the engine sees (the estate as it stands with its
maintenance windows not yet ended, the queues, the held tasks, the work placed with its time limit's
deadline, the capped arrays and each budget's use), the decisions applied back (a time-limit stop
ends the task timed out, not requeued; a maintenance stop requeues it at the front), then each cloud
pool's autoscaler step.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from dataclasses import replace

from .allocator import allocate
from .decisions import Decisions
from .scenario_model import Scenario
from .sim_deps import SimDependencies
from .sim_records import SimTask, kept_us
from .sim_state import US_PER_HOUR
from .snapshot import Budget, ComputeResource, Maintenance, PlacedTask, Policy, Pool, Profile, Snapshot

# The preemptions that count against a policy's max_preemptions_per_hour: another group's claim.
CAPPED_REASONS = ("reclaim", "fair_share")
TIME_LIMIT = "time_limit"  # a stop for good: the task ends timed out
MAINTENANCE = "maintenance"  # requeued at the front of its priority


class SimPass(SimDependencies):
    def __init__(self, sc: Scenario, end_us: int, record: bool = False):
        super().__init__(sc, end_us, record)
        self.saves = False  # some task checkpoints every checkpoint_s: its lost work is reported
        self.lost: dict[tuple[int, str], int] = {}  # (policy, reason) -> milli-GPU-us lost
        self.profiles = tuple(
            Profile(
                f.name,
                f.size,
                f.pools,
                sc.queuing_order[f.name],
                f.time_weight,
                f.size_from_task,
                f.min_runtime_s,
                f.starvation_s,
                f.unlimited_before_maintenance,
            )
            for f in sc.profiles
        )
        self.resources = tuple(ComputeResource(r.name, r.policy, r.profile) for r in sc.resources)
        self._pools()
        self._policies = [self._policy(i) for i in range(len(sc.policies))]

    def _pools(self, t: int = 0) -> None:
        """The pools at t: their capacity, and their maintenance windows not yet ended."""
        sc = self.sc
        self.pools = tuple(
            Pool(p.name, self.capacity[i], sc.execution_order[p.name], True, self._maintenance(p, t))
            for i, p in enumerate(sc.pools)
        )
        self.ended_windows = bisect_right(self.window_ends, t)

    def _maintenance(self, p, t: int) -> tuple[Maintenance, ...]:
        at = self.at
        return tuple(Maintenance(at(w.start_us), at(w.end_us)) for w in p.maintenance if w.end_us > t)

    def _policy(self, i: int, e_now: int | None = None, t: int = 0) -> Policy:
        """Policy i; with `e_now` (the enabled clock), its budget use and recent reclaims at t.
        A reservation set below the policy's `lendable` lends at most the reservation."""
        p = self.sc.policies[i]
        budgets = tuple(
            Budget(acc.limit, acc.period, 0 if e_now is None else acc.used(e_now))
            for acc in self.accounts.get(i, ())
        ) + tuple(
            Budget(acc.limit, acc.period, 0 if e_now is None else acc.used(e_now), acc.rates, acc.currency)
            for acc in self.spend.get(i, ())
        )
        reclaims = ()
        if i in self.capped:
            times = self.reclaims[i]
            while times and times[0] <= t - US_PER_HOUR:
                times.pop(0)
            reclaims = tuple(self.at(x) for x in times)
        cap = p.max_preemptions_per_hour
        return Policy(
            p.name,
            self.reservation[i],
            self.limit[i],
            p.parent,
            budgets,
            cap,
            reclaims,
            p.lending,
            p.over_quota_weight,
            None if p.lendable is None else min(p.lendable, self.reservation[i]),
        )

    def snapshot(self, t: int) -> Snapshot:
        for c in self.dirty_queues:
            self.queue_cache[self.resources[c].id] = tuple(self.queues[c])
        self.dirty_queues.clear()
        if self.window_ends and bisect_right(self.window_ends, t) != self.ended_windows:
            self._pools(t)
        e_now = self.enabled_clock(t)
        policies = list(self._policies)
        for i in self.accounts.keys() | self.spend.keys() | self.capped.keys():
            policies[i] = self._policy(i, e_now, t)
        return Snapshot(
            self.at(t),
            self.pools,
            self.profiles,
            tuple(policies),
            self.resources,
            self.queue_cache,
            tuple(self._saved(t)) if self.saves else tuple(self.placed.values()),
            self.sc.low_watermark_s,
            held=self.held_tasks() if self.held else (),
            arrays=self.arrays,
        )

    def _saved(self, t: int):
        """The placed work with when each task that checkpoints every checkpoint_s last saved."""
        for p in self.placed.values():
            task = self.tasks[p.id]
            if task.checkpoint_us is None or task.started_us is None:
                yield p
            else:
                yield replace(p, saved_at=self.at(task.started_us + kept_us(task, t)))

    def _lose(self, task: SimTask, reason: str, t: int) -> None:
        """A preemption at t loses the task's running time since its last checkpoint."""
        if task.started_us is not None:
            lost = task.size * (max(0, t - task.started_us) - kept_us(task, t))
            key = (self.cr_pol[task.cr], reason)
            self.lost[key] = self.lost.get(key, 0) + lost

    def _pass(self, t: int) -> bool:
        decisions = allocate(self.snapshot(t))
        self.apply(decisions, t)
        return bool(decisions.placements or decisions.preemptions)

    def apply(self, d: Decisions, t: int) -> None:
        at = self.seconds(t)
        front: dict[int, list] = {}  # compute resource -> its tasks stopped for maintenance
        for pre in d.preemptions:
            task = self.tasks[pre.task]
            if pre.reason == TIME_LIMIT:
                self._stop(task, t, "timed_out")
                self.ends["timed_out"] += 1
                self.lines.append({"at": at, "task": task.id, "event": "timed_out"})
                self._ended(task, t)
                continue
            if task.session is not None:
                task.session.reason = pre.reason
            self._lose(task, pre.reason, t)
            self._stop(task, t, "waiting")
            if pre.reason == MAINTENANCE and task.state == "waiting":
                front.setdefault(task.cr, []).append(task)
            line = {"at": at, "task": task.id, "event": "preempted", "reason": pre.reason}
            if pre.window is not None and self.named_window[self.cr_pol[task.cr]]:
                line["window"] = pre.window
            self.lines.append(line)
            if pre.reason in CAPPED_REASONS and self.cr_pol[task.cr] in self.capped:
                self.reclaims[self.cr_pol[task.cr]].append(t)
                heapq.heappush(self.unguard, t + US_PER_HOUR)
            if task.state == "canceled":  # a session: preempted, it ends
                self._ended(task, t)
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
        for c, tasks in front.items():
            self._to_front(c, tasks)
        now = self.at(t)
        for task in sorted(started, key=lambda x: x.seq):
            r = self.resources[task.cr]
            self.placed[task.id] = PlacedTask(
                task.id,
                r.id,
                self.sc.pools[task.pool].name,
                task.size,
                task.seq,
                now,
                priority=task.waiting.priority,
                deadline=None if task.deadline_us is None else self.at(task.deadline_us),
                array=task.waiting.array,
            )

    def _to_front(self, c: int, tasks: list) -> None:
        """Tasks of compute resource c stopped for maintenance in one pass go before every task
        still waiting in its queue after the pass: the n of them, in their old seq order, take
        seqs m - n to m - 1, m the smallest seq of the others (when none waits, they keep theirs)."""
        ids = {task.id for task in tasks}
        others = [w for w in self.queues[c] if w.id not in ids]
        if not others:
            return
        m, n = min(w.seq for w in others), len(tasks)
        self.queues[c] = others
        for i, task in enumerate(sorted(tasks, key=lambda x: x.seq)):
            task.seq = m - n + i
            task.waiting = replace(task.waiting, seq=task.seq)
            self._enqueue(task)

    def _autoscale(self, t: int) -> bool:
        """Each cloud pool's autoscaler step after the pass: tasks whose node has room start."""
        changed = False
        at = self.seconds(t)
        for i, cloud in self.clouds.items():
            started, events = cloud.step(t, self.pool_used[i])
            for task_id in started:
                task = self.tasks[task_id]
                self._run(task, t)
                if task.deadline_us is not None:
                    self.placed[task_id] = replace(self.placed[task_id], deadline=self.at(task.deadline_us))
            self.lines.extend({"at": at} | e for e in events)
            changed |= bool(started or events)
        return changed
