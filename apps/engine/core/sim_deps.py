"""Dependencies in the simulator (issue 35): a submitted task whose `after_ok` / `after_any` tasks
have not all ended is held (the snapshot's `held`, verdict dependency), not queued. When a task
ends (completed, canceled, timed out, rejected), each task held on it is released once everything
it waits for has ended, and joins its queue then (its `since`, and its wait, count from there); a
task whose `after_ok` task ended in any state but completed is canceled, reason dependency_failed,
and so, in turn, are its own dependants on `after_ok`, while its `after_any` dependants count it as
ended.
"""

from __future__ import annotations

import heapq
from dataclasses import replace

from .sim_records import SimTask
from .sim_state import SimState
from .snapshot import HeldTask

ENDED = ("completed", "canceled", "timed_out", "rejected")
DEPENDENCY_FAILED = "dependency_failed"


class SimDependencies(SimState):
    def _hold(self, task: SimTask, after_ok: tuple[str, ...], after_any: tuple[str, ...], t: int) -> bool:
        """At submit (counted among the queued): hold the task, or cancel it when an `after_ok`
        task already failed; False when all it runs after has ended well (it is queued)."""
        tasks = self.tasks
        ended = {n for n in (*after_ok, *after_any) if n in tasks and tasks[n].state in ENDED}
        if any(n in ended and tasks[n].state != "completed" for n in after_ok):
            self.held[task.id] = task
            self._fail(task, t)
            self._ended(task, t)
            return True
        waits = [n for n in (*after_ok, *after_any) if n not in ended]
        if not waits:
            return False
        task.state, task.waits_for = "held", waits
        self.held[task.id] = task
        self.held_cache = None
        return True

    def _ended(self, task: SimTask, t: int) -> None:
        """The task ended: release or cancel what waits for it, and so on down the line."""
        if task.id not in self.dependants:
            return
        todo = [task]
        while todo:
            done = todo.pop()
            for name, ok in self.dependants.get(done.id, ()):
                d = self.tasks.get(name)
                if d is None or d.state != "held":
                    continue  # not submitted yet (it checks at its submit), or it ended already
                if ok and done.state != "completed":
                    self._fail(d, t)
                    todo.append(d)
                    continue
                d.waits_for.remove(done.id)
                self.held_cache = None
                if not d.waits_for:
                    self._release(d, t)

    def _fail(self, task: SimTask, t: int) -> None:
        del self.held[task.id]
        self.held_cache = None
        task.state, task.reason, task.waits_for = "canceled", DEPENDENCY_FAILED, None
        self.own_queued[self.cr_pol[task.cr]] -= 1
        self.ends[DEPENDENCY_FAILED] += 1
        line = {"at": self.seconds(t), "task": task.id, "event": "canceled", "reason": DEPENDENCY_FAILED}
        self.lines.append(line)

    def _release(self, task: SimTask, t: int) -> None:
        del self.held[task.id]
        self.held_cache = None
        task.state, task.waits_for = "waiting", None
        task.since_us = t
        task.waiting = replace(task.waiting, since=self.at(t))
        self._enqueue(task)
        starvation_us = self.cr_starvation_us[task.cr]
        if starvation_us is not None:
            heapq.heappush(self.unguard, t + starvation_us)

    def _unhold(self, task: SimTask) -> None:
        """A held task canceled by its owner."""
        del self.held[task.id]
        self.held_cache = None
        task.state, task.waits_for = "canceled", None
        self.own_queued[self.cr_pol[task.cr]] -= 1

    def held_tasks(self) -> tuple[HeldTask, ...]:
        """The snapshot's held tasks, in submit order."""
        if self.held_cache is None:
            self.held_cache = tuple(
                HeldTask(task.id, self.sc.resources[task.cr].name, task.seq, tuple(task.waits_for))
                for task in self.held.values()
            )
        return self.held_cache
