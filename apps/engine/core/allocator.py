"""The compute policy engine pass: `allocate(snapshot) -> Decisions`, pure and deterministic.

A pass runs, in order: time-limit stops (work whose `deadline` is reached is stopped for good,
reason "time_limit", in placement order), maintenance stops (work on a pool whose maintenance window
has started is requeued at the front of its priority, reason "maintenance"), budget stops (used-up
budgets preempt their running weighted work, newest placed first), the starvation guard's holds
(`pass_starvation`), fill reservations, reclaim, [under a parent that lends "fair": the fair split,
the fair lend and fair reclaim (`pass_fair`)], priority within a policy (`pass_priority`), lend.
When a preemption freed more room than its taker took, a second fill runs before lending, so that
the room goes to reservation-eligible work first and not to a borrower that the next pass would
preempt. Every phase visits work in the same order: rounds over the r-th choice of each profile's
pool list; in a round, pools in snapshot order; on a pool, profiles in its execution order; in a
profile, policies in its queuing order; in a compute resource, queue order (priority, then seq). A
task that does not fit does not block smaller ones behind it. A reached spend cap keeps its
policies' new work off its pools; work already there goes on. Tasks of `Snapshot.held` wait for
their dependencies: the pass only gives them their verdict. A capped array (`Snapshot.arrays`) never
has more than its `max_running` tasks placed; a task of it refused for that is passed over
(`pass_queue.ArrayQueue`). A pool in maintenance has capacity 0; one with a window ahead takes a
task only if its time limit left ends by the window's start, or it has none and its profile allows
that (`pass_queue.WindowQueue`); a task refused there may go to another pool.

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

from .decisions import Decisions
from .pass_fair import FairPhase
from .pass_priority import PriorityPhase
from .pass_starvation import StarvationGuard
from .pass_state import FILL, LEND, MAINTENANCE, TIME_LIMIT
from .snapshot import Snapshot
from .verdicts import VerdictBook


def allocate(snapshot: Snapshot) -> Decisions:
    run = _Pass(snapshot)
    run.run()
    return Decisions(tuple(run.placements), tuple(run.preemptions), VerdictBook(run))


class _Pass(PriorityPhase, FairPhase, StarvationGuard):
    """One pass: its phases in order, over the state they share (`pass_state`)."""

    def run(self) -> None:
        if self.timed:
            self._time_limit_stops()
        if self.down:
            self._maintenance_stops()
        self._budget_stops()
        self.occ_start = list(self.occ)
        self._hold_starving()
        self._fill_or_lend(FILL)
        stops = len(self.preemptions)
        self._reclaim_phase()
        if self.fair_parents:
            if len(self.preemptions) > stops:
                self._fill_or_lend(FILL)
                stops = len(self.preemptions)
            self._fair_split()
            self._fill_or_lend(LEND, fair=True)
            self._fair_reclaim_phase()
        self._priority_phase()
        if len(self.preemptions) > stops:
            self._fill_or_lend(FILL)
        self._fill_or_lend(LEND)

    def _time_limit_stops(self) -> None:
        """Placed work whose time limit is reached stops for good, freeing its GPUs in this pass."""
        now, gone = self.s.now, self.gone
        for k, t in enumerate(self.s.placed):
            if t.deadline is not None and t.deadline <= now and not gone[k]:
                self._preempt(k, TIME_LIMIT, None)

    def _maintenance_stops(self) -> None:
        """Placed work on a pool in maintenance is stopped (requeued), in placement order."""
        down, gone, run_pool = self.down, self.gone, self.run_pool
        for k in range(len(self.s.placed)):
            if run_pool[k] in down and not gone[k]:
                self._preempt(k, MAINTENANCE, None)
