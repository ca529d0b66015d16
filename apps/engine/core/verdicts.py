"""Why each task still waits after a pass, derived lazily from the pass's final state.

All tasks of one size in one compute resource share a rule, so the rule is computed once per
(compute resource, size) and each task adds only its position. Rules, first match wins:

- never_fits: its size is larger than every enabled pool of its profile's list (cause "capacity",
  `pools` names the largest), or no pool of the list is enabled (cause "no_pool").
- budget_used_up: its profile has a weight and its policy's or an ancestor's budget is used up;
  `cause` is the used-up window that resets last, `reset_at` the end of its UTC period.
- policy_limit: its size would take its policy above its limit.
- ancestor_limit: ... an ancestor above its limit (`policy` names the nearest such ancestor).
- budget_start_check: the budget left would not last the low watermark at the policy's (or the
  budgeted ancestor's) combined rate with this task; hours left and needed are given, `cause` is
  the window with the least left.
  A money window (`pass_money`) gives these two rules when it refuses the task on every enabled
  pool of its list; `cause` is then its label ("month 500.00 EUR") and the figures money units.
- behind_higher_priority: every limit and budget rule allows it, but either no pool of its list
  has room now while one had room when the pass began (work ahead of it in the pass order took
  it), or a pool has room and work ahead of it in its own queue, of the same or smaller size, is
  still stopping and goes first.
- fair_share: a group of its chain, a child of a parent that lends "fair", would go above its fair
  share of borrowed GPUs with it while no pool has room (`policy` names the group; `borrowed` and
  `share` give the figures).
- reclaim_held: it could take its reservation back only from work that is protected (minimum
  runtime or the victims' preemption cap): `cause` says which, `reset_at` when the last of the
  victims it needs is free, `pools` the pool.
- cloud_cap_reached: no pool of its list open to it has room, and reached spend caps keep it off
  others (`pools` names them; `reset_at` is the earliest time one of them opens again to it, a
  pool opening when the last cap closing it resets; `policy` is that cap's id).
- maintenance: the rule would be behind_higher_priority or no_capacity, and a pool of its list is
  in maintenance now (cause "in_maintenance"; `pools` the first such, `since` and `reset_at` its
  window): `verdict_windows`.
- no_capacity: no pool of its list has had room for its size in this pass.

Per task, over its group's rule: a waiting task of a capped array whose placed tasks are at its
`max_running` after the pass gets array_limit, unless one of the rules up to budget_start_check
already holds it (`cause` the array, `max_running` its cap). A held task (`Snapshot.held`) gets
dependency, `waits_for` the tasks it waits for, position 0: it is not in line, and the positions of
the waiting tasks do not count it.

Per task, over its group's rule when a pool of its profile's list has a maintenance window ahead:
maintenance, cause "window_ahead", where that window (or one in maintenance, whichever pool comes
first in the list) keeps it off a pool and its group's rule is one of the room rules above
(`verdict_windows`; `Decisions.maintenance_verdicts`).

Where the starvation guard holds pools (`pass_starvation`), a behind_higher_priority or no_capacity
rule becomes starvation_hold for the tasks it keeps off a held pool, and starving for the holder
itself (per task: `verdict_holds`).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator
from typing import TYPE_CHECKING

from .budget import period_bounds
from .decisions import Verdict
from .pass_money import money_rule
from .verdict_holds import ROOM_RULES, held_rule, holder_rule
from .verdict_windows import FROM_ROOM, MAINTENANCE, WINDOW_AHEAD, maintenance_rule

if TYPE_CHECKING:
    from .pass_state import PassState

DEPENDENCY, ARRAY_LIMIT = "dependency", "array_limit"
BEFORE_ARRAY_LIMIT = ("never_fits", "budget_used_up", "policy_limit", "ancestor_limit", "budget_start_check")


class VerdictBook:
    def __init__(self, run: PassState):
        self.run = run
        self.rules: dict[tuple[int, int], tuple] = {}
        self.rooms: dict[tuple[int, int], tuple[str, ...]] = {}  # (profile, size) -> ``_room``
        self.placed: dict[int, list[int]] = {}
        self.where: dict[str, tuple[int, int]] | None = None
        self.held_by: dict[str, int] | None = None  # a holder's task id -> the pool it holds
        self.held_verdicts: tuple[Verdict, ...] | None = None  # Snapshot.held's
        self.held_ix: dict[str, Verdict] | None = None

    def verdict(self, task_id: str) -> Verdict | None:
        if self.where is None:
            self.where = {}
            for c, rid in enumerate(self.run.cr_id):
                for i, t in enumerate(self.run.s.waiting.get(rid, ())):
                    self.where[t.id] = (c, i)
        found = self.where.get(task_id)
        if found is None:
            return self._held_by_id().get(task_id) if self.run.s.held else None
        c, i = found
        placed = self._placed(c)
        before = bisect_left(placed, i)
        if before < len(placed) and placed[before] == i:
            return None
        task = self.run.s.waiting[self.run.cr_id[c]][i]
        return Verdict(task.id, self.run.cr_id[c], i + 1 - before, *self._task_rule(c, task))

    def verdicts(self) -> Iterator[Verdict]:
        yield from self._waiting(range(len(self.run.cr_id)))
        yield from self.held()

    def _waiting(self, cs) -> Iterator[Verdict]:
        """The verdicts of compute resources cs' tasks still waiting, in queue order."""
        run = self.run
        for c in cs:
            rid = run.cr_id[c]
            tasks = run.s.waiting.get(rid)
            if not tasks:
                continue
            placed = set(self._placed(c))
            position = 0
            for i, t in enumerate(tasks):
                if i in placed:
                    continue
                position += 1
                yield Verdict(t.id, rid, position, *self._task_rule(c, t))

    def held(self) -> tuple[Verdict, ...]:
        """The held tasks' verdicts (rule dependency), in snapshot order."""
        if self.held_verdicts is None:
            self.held_verdicts = tuple(
                Verdict(h.id, h.resource, 0, DEPENDENCY, waits_for=h.waits_for) for h in self.run.s.held
            )
        return self.held_verdicts

    def _held_by_id(self) -> dict[str, Verdict]:
        if self.held_ix is None:
            self.held_ix = {v.task: v for v in self.held()}
        return self.held_ix

    def array_limited(self) -> tuple[Verdict, ...]:
        """The verdicts of the waiting tasks that their array's cap holds, in `verdicts()` order."""
        left = self.run.array_left
        if not any(n <= 0 for n in left.values()):
            return ()
        return tuple(v for v in self.verdicts() if v.rule == ARRAY_LIMIT)

    def maintenance_held(self) -> tuple[Verdict, ...]:
        """The verdicts of the waiting tasks that a window ahead keeps off a pool (cause
        window_ahead), in `verdicts()` order; only queues of profiles listing such a pool are read."""
        run = self.run
        if run.gaps is None:
            return ()
        cs = [c for c in range(len(run.cr_id)) if run.windowed[run.cr_prof[c]]]
        return tuple(v for v in self._waiting(cs) if v.rule == MAINTENANCE and v.cause == WINDOW_AHEAD)

    def group(self, resource_id: str, size: int) -> Verdict | None:
        """The verdict shared by the waiting tasks of one size in one compute resource (position
        0: it stands for the group, not a task); None for an unknown compute resource."""
        c = self.run.cr_ix.get(resource_id)
        if c is None:
            return None
        return Verdict("", resource_id, 0, *self._rule(c, size))

    def _placed(self, c: int) -> list[int]:
        got = self.placed.get(c)
        if got is None:
            q = self.run.queues.get(c)
            got = self.placed[c] = sorted(q.placed) if q else []
        return got

    def _rule(self, c: int, size: int) -> tuple:
        got = self.rules.get((c, size))
        if got is None:
            got = self._decide(c, size)
            if self.run.down and got[0] in ROOM_RULES:
                got = maintenance_rule(self.run, c, size) or got
            if self.run.hold:
                got = held_rule(self.run, c, size, got)
            got = self.rules[(c, size)] = got
        return got

    def _task_rule(self, c: int, task) -> tuple:
        """The task's group rule, or the holder's own (starving) when it holds a pool, or
        array_limit when its array's cap holds it and no rule before that one does, or maintenance
        (window_ahead) when a pool's window ahead refuses it and its group's rule is a room rule."""
        left = self.run.array_left
        if left and task.array is not None and left.get(task.array, 1) <= 0:
            rule = self._rule(c, task.size)
            if rule[0] in BEFORE_ARRAY_LIMIT:
                return rule
            cap = self.run.s.arrays[task.array]
            return (ARRAY_LIMIT, (), None, None, None, None, task.array, *(None,) * 4, (), cap)
        if self.run.hold:
            if self.held_by is None:
                self.held_by = {holder: pi for pi, holder in self.run.hold.items()}
            pi = self.held_by.get(task.id)
            if pi is not None:
                return holder_rule(self.run, pi, task.size, self._decide(c, task.size))
        rule = self._rule(c, task.size)
        run = self.run
        if run.gaps is not None and run.windowed[run.cr_prof[c]] and rule[0] in FROM_ROOM:
            return maintenance_rule(run, c, task.size, task) or rule
        return rule

    def holders(self) -> tuple[Verdict, ...]:
        """The verdicts of the tasks still holding a pool at the end of the pass, in pool order."""
        got = []
        for pi in sorted(self.run.hold):
            v = self.verdict(self.run.hold[pi])
            if v is not None:
                got.append(v)
        return tuple(got)

    def _decide(self, c: int, size: int) -> tuple:
        run = self.run
        s = run.s
        p, fi = run.cr_pol[c], run.cr_prof[c]
        w = run.weight[fi]
        U, lim, rem, rw = run.U, run.lim, run.rem, run.rw
        never = self._never_fits(fi, size)
        if never is not None:
            return never
        if w:
            for j in run.bchain[p]:
                if rem[j] <= 0:
                    period = run.window[j]
                    reset = period_bounds(s.now, period)[1]
                    return ("budget_used_up", (), s.policies[j].id, rem[j], None, reset, period)
        if run.money:
            money = money_rule(run, p, fi, size, used_up_only=True)
            if money is not None:
                return money
        if U[p] + size > lim[p]:
            return ("policy_limit", (), s.policies[p].id)
        for a in run.anc[p]:
            if U[a] + size > lim[a]:
                return ("ancestor_limit", (), s.policies[a].id)
        if w:
            for j in run.bchain[p]:
                needed = run.lw * (rw[j] + w)
                if rw[j] and rem[j] < needed:
                    period = run.window[j]
                    return ("budget_start_check", (), s.policies[j].id, rem[j], needed, None, period)
        if run.money:
            money = money_rule(run, p, fi, size, used_up_only=False)
            if money is not None:
                return money
        listed = s.profiles[fi].pools
        reopens = {}
        for pid in listed:
            pi = run.pool_ix[pid]
            if run.enabled[pi]:
                caps = run.capped(pi, p)
                if caps:
                    reopens[pid] = max(cap.resets_at for cap in caps)
        room = self._room(fi, size, reopens)
        if room:
            return ("behind_higher_priority", room)
        if run.share:
            for n in run.chain[p]:
                share = run.share.get(n)
                if share is not None and U[n] - run.res[n] + size > share:
                    borrowed = max(0, U[n] - run.res[n])
                    return ("fair_share", (), s.policies[n].id, None, None, None, None, borrowed, share)
        held = run.held.get((c, size))
        if held is not None:
            cause, until, pool = held
            return ("reclaim_held", (pool,), None, None, None, until, cause)
        if reopens:
            first = min(reopens, key=lambda pid: (reopens[pid], listed.index(pid)))
            cap = max(run.capped(run.pool_ix[first], p), key=lambda cap: (cap.resets_at, cap.id))
            return ("cloud_cap_reached", tuple(reopens), cap.id, None, None, reopens[first])
        return ("no_capacity", listed)

    def _room(self, fi: int, size: int, reopens: dict) -> tuple[str, ...]:
        """The pools of the profile's list with room for ``size`` now, else those that had it when
        the pass began; empty when none. The same for every compute resource of the profile when
        no spend cap is reached for its policy, so it is computed once per (profile, size) then."""
        key = (fi, size)
        if not reopens and key in self.rooms:
            return self.rooms[key]
        run = self.run
        room: tuple[str, ...] = ()
        for occ in (run.occ, run.occ_start):
            room = tuple(
                pid
                for pid in run.s.profiles[fi].pools
                if run.enabled[run.pool_ix[pid]]
                and pid not in reopens
                and run.cap[run.pool_ix[pid]] - occ[run.pool_ix[pid]] >= size
            )
            if room:
                break
        if not reopens:
            self.rooms[key] = room
        return room

    def _never_fits(self, fi: int, size: int) -> tuple | None:
        run = self.run
        listed = run.s.profiles[fi].pools
        best = None
        declared = run.s.pools  # declared capacities: a pool in maintenance is not "too small"
        for pid in listed:
            pi = run.pool_ix[pid]
            if run.enabled[pi] and (best is None or declared[pi].capacity > declared[best].capacity):
                best = pi
        if best is None:
            return ("never_fits", listed, None, None, None, None, "no_pool")
        if declared[best].capacity < size:
            return ("never_fits", (declared[best].id,), None, None, None, None, "capacity")
        return None
