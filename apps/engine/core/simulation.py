"""The simulator (DESIGN section 5): the engine core on a virtual clock, with no database.
`Simulation(scenario, end_us).run()` yields the output lines; `simulator` is its command line.
This module holds the clock's loop and the events and completions it applies; the state and a
task's life are in `sim_state`, the pass in `sim_pass`, the summary in `sim_summary`.

The clock advances in steps of `pass_interval_s`, kept in integer microseconds. At each step:
budget periods that ended roll over, completions due are applied, then the events due, then a
pass runs (unless the engine is disabled), then each cloud pool's autoscaler step (`cloud.py`).
Steps at which nothing can change (no event, completion, period end, budget running out, node up
or idle deadline, time limit reached, and the last pass decided nothing) are skipped: a pass there
would decide nothing, so the output is the same as running every step.

Budgets are metered from usage intervals: per window of each budgeted policy, the closed
intervals' charge in the window's current period plus, for the running ones, weight x enabled
time since max(start, period start), using an "enabled clock" that stops while the engine is
disabled. Tasks complete at the exact moment `duration_s` after they start (at placement; on a
cloud pool, when a node has room), charged from placement until then; the engine sees it at the
next step, and the output reports that step's time. A submit larger than every pool of its
profile's list (at their capacity then) is rejected, not queued. Reclaim times of policies with
a preemption cap are kept for the sliding hour. A session (`sessions.py`) is scheduled the same
way at its first stop: its duration, or the moment an idle limit fires, from its activity
profile; it is never requeued. Issue 35: a task's time limit is the pass's (its deadline is in the
snapshot), a held task waits in `sim_deps`, an array's tasks are plain submits with its cap in the
snapshot's `arrays`; the clock wakes at each maintenance window's start and end; a loan moves its
amount at its event and back when the clock reaches its `until` (before that step's events, and
also while the engine is disabled).
"""

from __future__ import annotations

import heapq
from bisect import bisect_right

from .budget import US_PER_S
from .scenario_model import Change, Loan, Submit
from .sim_pass import SimPass
from .sim_records import SimSession, SimTask
from .sim_summary import SimSummary
from .snapshot import WaitingTask


class Simulation(SimPass, SimSummary):
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
        while self.deadlines and self.deadlines[0] <= t:
            heapq.heappop(self.deadlines)
        if self.deadlines:
            due.append(self.deadlines[0])
        if self.loan_ends:
            due.append(self.loan_ends[0][0])
        if self.boundaries:
            i = bisect_right(self.boundaries, t)
            if i < len(self.boundaries):
                due.append(self.boundaries[i])
        if not due:
            return self.end_us + self.step
        nxt = max(min(due), t + self.step)
        return -(-nxt // self.step) * self.step

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
            else:
                self._stop(task, end_us, "completed")
                self.lines.append({"at": self.seconds(t), "task": task.id, "event": "completed"})
            self._ended(task, t)
        return changed

    def _apply_events(self, t: int) -> bool:
        """The loans that end by t go back, then the events due are applied."""
        events = self.sc.events
        changed = False
        while self.loan_ends and self.loan_ends[0][0] <= t:
            _, _, loan = heapq.heappop(self.loan_ends)
            self._lend(loan, -1)
            changed = True
        while self.next_event < len(events) and events[self.next_event].at_us <= t:
            what = events[self.next_event].what
            self.next_event += 1
            changed = True
            if isinstance(what, Submit):
                self._submit(what, t)
            elif isinstance(what, Loan):
                self._lend(what, +1)
                heapq.heappush(self.loan_ends, (what.until_us, self.next_event, what))
            else:
                self._change(what, t)
        return changed

    def _lend(self, loan: Loan, sign: int) -> None:
        """Move a loan's amount from its lender to its borrower (sign 1), or back (-1)."""
        amount = loan.amount * sign
        lender, borrower = self.pol_ix[loan.lender], self.pol_ix[loan.borrower]
        if loan.key == "budget_hours":
            next(acc for acc in self.accounts[lender] if acc.period == loan.period).limit -= amount
            next(acc for acc in self.accounts[borrower] if acc.period == loan.period).limit += amount
            return
        book = self.reservation if loan.key == "reservation" else self.limit
        book[lender] -= amount
        book[borrower] += amount
        for i in (lender, borrower):
            self._policies[i] = self._policy(i)

    def _submit(self, s: Submit, t: int) -> None:
        profile = self.sc.resources[self.cr_ix[s.resource]].profile
        if s.size > max((self.capacity[i] for i in self.profile_pools[profile]), default=0):
            task = self.tasks[s.id] = SimTask(
                s.id, self.cr_ix[s.resource], s.size, s.duration_us, s.checkpoint, 0, None, "rejected"
            )
            self.lines.append(
                {"at": self.seconds(t), "task": s.id, "event": "rejected", "reason": "never_fits"}
            )
            self._ended(task, t)
            return
        self.seq += 1
        array = s.array if s.max_running is not None else None
        task = SimTask(
            s.id,
            self.cr_ix[s.resource],
            s.size,
            s.duration_us,
            s.checkpoint,
            self.seq,
            WaitingTask(s.id, self.seq, s.size, s.priority, self.at(t), array, _seconds(s.time_limit_us)),
        )
        task.left_us = s.duration_us
        task.checkpoint_us = s.checkpoint_us
        self.saves = self.saves or s.checkpoint_us is not None
        task.since_us = t
        task.limit_us = s.time_limit_us
        if s.kind == "session":
            task.session = SimSession(s.activity, self.sc.resources[task.cr].idle_limits)
        self.tasks[s.id] = task
        self.own_queued[self.cr_pol[task.cr]] += 1
        if (s.after_ok or s.after_any) and self._hold(task, s.after_ok, s.after_any, t):
            return
        self._enqueue(task)
        starvation_us = self.cr_starvation_us[task.cr]
        if starvation_us is not None:
            heapq.heappush(self.unguard, t + starvation_us)

    def _change(self, c: Change, t: int) -> None:
        if c.kind == "cancel":
            task = self.tasks[c.target]
            if task.state == "running":
                self._stop(task, t, "canceled")
            elif task.state == "waiting":
                self._unqueue(task, t)
                task.state = "canceled"
            elif task.state == "held":
                self._unhold(task)
            else:
                return
            self.lines.append({"at": self.seconds(t), "task": task.id, "event": "canceled"})
            self._ended(task, t)
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
            self._pools(t)
        else:
            i = self.pol_ix[c.target]
            if c.kind == "set_budget":
                next(acc for acc in self.accounts[i] if acc.period == c.period).limit = c.value
            elif c.kind == "set_reservation":
                self.reservation[i] = c.value
            else:
                self.limit[i] = c.value
            self._policies[i] = self._policy(i)


def _seconds(us: int | None) -> int | None:
    return None if us is None else us // US_PER_S
