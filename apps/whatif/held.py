"""Why a what-if change made no difference to a group (docs/whatif.md, "No difference"): the rule
that held the group's tasks on the changed side, from the simulator's own verdicts.

A group shows no difference when none of its figures moved (tasks, waits, GPU-hours, budget
hours). For such a group the changed side is replayed once more with a watch on its compute
resources (its subtree's): after each pass, the verdict of each (compute resource, size) of its
waiting tasks (``Decisions.group_verdict``, the rule the live engine stores) and the held tasks'
dependency, weighted by the time until the next pass. The rule with the most task-time is the one
that held the group. Only groups whose tasks waited are replayed; the replay is skipped when
there is none. Pure: the engine core only, no Django."""

from __future__ import annotations

from collections import Counter

from apps.engine.core.allocator import allocate
from apps.engine.core.budget import units_to_hours
from apps.engine.core.scenario_model import Scenario
from apps.engine.core.simulation import Simulation
from apps.engine.core.whatif_changes import changed_scenario

FIGURES = ("tasks", "wait_median_s", "wait_p95_s", "waited_past_threshold", "gpu_hours", "budget_hours")
# The changes that name a group (the others name a profile or a pool).
GROUP_KINDS = ("reservations", "limits", "budgets", "lending", "over_quota_weights")
BUDGET_RULES = ("budget_used_up", "budget_start_check")
LIMIT_RULES = ("policy_limit", "ancestor_limit")


def unchanged(report: dict) -> list[str]:
    """The groups none of whose figures moved: those a change names, or every group when the
    changes name none (a pool's capacity, a profile's pool order or time weight)."""
    named = {g for kind in GROUP_KINDS for g in (report["changes"].get(kind) or {})}
    diff = report["difference"]["groups"]
    same = [g for g, figures in diff.items() if not any(figures.get(k) for k in FIGURES)]
    return [g for g in same if g in named] if named else same


def explain(scenario: dict, changes: dict, report: dict) -> dict[str, dict]:
    """Per group without a difference: ``{"tasks": 0}`` when it had no task; ``rule`` None when
    its tasks did not wait on the changed side; else the rule that held them most (``rule``),
    whose limit or budget it is (``policy``, ``window``, and ``hours`` or ``gpus``) and its share
    of the waiting task-time (``share``, 0..1)."""
    out: dict[str, dict] = {}
    watched = []
    for g in unchanged(report):
        figures = report["changed"]["groups"][g]
        if not figures["tasks"]:
            out[g] = {"tasks": 0}
        elif not figures["wait_p95_s"] and not figures["waited_past_threshold"]:
            out[g] = {"tasks": figures["tasks"], "rule": None}
        else:
            watched.append(g)
    if watched:
        sc = changed_scenario(scenario, changes)[1]
        tallies = Watch(sc, watched).tallies()
        for g in watched:
            out[g] = {"tasks": report["changed"]["groups"][g]["tasks"]} | _held(sc, tallies[g])
    return dict(sorted(out.items()))


def _held(sc: Scenario, tally: Counter) -> dict:
    if not tally:
        return {"rule": None}
    (rule, policy, window), most = tally.most_common(1)[0]
    held = {"rule": rule, "share": round(most / sum(tally.values()), 3)}
    spec = next((p for p in sc.policies if p.name == policy), None)
    if spec is not None and rule in BUDGET_RULES + LIMIT_RULES:
        held["policy"] = policy
    if spec is not None and rule in BUDGET_RULES:
        units = dict(spec.budgets).get(window)
        held |= {"window": window, "hours": None if units is None else units_to_hours(units)}
    elif spec is not None and rule in LIMIT_RULES:
        held["gpus"] = spec.limit / 1000
    return held


class Watch(Simulation):
    """The simulator, tallying per watched group the task-time its waiting tasks spent under each
    (rule, policy, window) of their verdicts."""

    def __init__(self, sc: Scenario, groups: list[str]):
        super().__init__(sc, sc.duration_us)
        ix = {g: self.pol_ix[g] for g in groups}
        self.counts = {g: Counter() for g in groups}
        self.watched: dict[int, list[str]] = {}
        for c, p in enumerate(self.cr_pol):
            above = [g for g, i in ix.items() if i in self.chain[p]]
            if above:
                self.watched[c] = above
        self.holding: list[tuple[list[str], tuple, int]] = []
        self.since = 0

    def tallies(self) -> dict[str, Counter]:
        for _ in self.run():
            pass
        self._credit(self.end_us)
        return self.counts

    def _credit(self, t: int) -> None:
        span = t - self.since
        for groups, key, n in self.holding:
            for g in groups:
                self.counts[g][key] += n * span
        self.since = t

    def _pass(self, t: int) -> bool:
        self._credit(t)
        decisions = allocate(self.snapshot(t))
        placed = Counter((self.tasks[p.task].cr, self.tasks[p.task].size) for p in decisions.placements)
        self.holding = []
        for c, groups in self.watched.items():
            sizes = Counter(w.size for w in self.queues[c])
            for size, n in sizes.items():
                n -= placed[(c, size)]
                verdict = decisions.group_verdict(self.resources[c].id, size) if n > 0 else None
                if verdict is not None:
                    self.holding.append((groups, (verdict.rule, verdict.policy, verdict.cause), n))
        held = Counter(task.cr for task in self.held.values() if task.cr in self.watched)
        self.holding += [(self.watched[c], ("dependency", None, None), n) for c, n in held.items()]
        self.apply(decisions, t)
        return bool(decisions.placements or decisions.preemptions)
