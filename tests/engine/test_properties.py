"""Property tests: random estates and queues, every rule checked on every pass.

`check_pass` is the oracle. It recomputes the state after the pass from the snapshot and the
decisions alone and asserts each invariant; it is applied to random single snapshots and to
every pass of random simulated runs.
"""

from collections import defaultdict
from datetime import timedelta

from engine_helpers import NOW
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.engine.core import (
    UNITS_PER_HOUR,
    Budget,
    ComputeResource,
    PlacedTask,
    Policy,
    Pool,
    Profile,
    Snapshot,
    SpendCap,
    WaitingTask,
    allocate,
    validate,
)
from apps.engine.core.decisions import RULES
from apps.engine.core.scenario import parse
from apps.engine.core.simulation import Simulation

SIZES = (250, 500, 1000, 2000, 3000)


@st.composite
def estates(draw):
    pool_ids = [f"P{i}" for i in range(draw(st.integers(1, 3)))]
    caps = {p: draw(st.integers(0, 16)) * 250 for p in pool_ids}
    enabled = {p: draw(st.sampled_from([True, True, True, False])) for p in pool_ids}

    profiles = []
    for i in range(draw(st.integers(1, 3))):
        sft = draw(st.booleans())
        size = 1000 if sft else draw(st.sampled_from((0,) + SIZES[:4]))
        order = draw(st.permutations(pool_ids))
        profiles.append(
            dict(
                id=f"F{i}",
                size=size,
                sft=sft,
                weight=draw(st.sampled_from([0, 500, 1000, 2000])),
                pools=tuple(order[: draw(st.integers(1, len(order)))]),
                min_runtime_s=draw(st.sampled_from([0, 0, 600, 3000])),
            )
        )

    zero_parent_reservations = draw(st.booleans())
    policies, parent = [], {}
    n = draw(st.integers(1, 5))
    for i in range(n):
        pid = f"Q{i}"
        parent[pid] = draw(st.sampled_from([None] + [p["id"] for p in policies]))
        res = draw(st.integers(0, 12)) * 250
        budgets = ()
        if draw(st.integers(0, 3)) == 0:
            periods = draw(
                st.lists(st.sampled_from(["day", "week", "month"]), min_size=1, max_size=3, unique=True)
            )
            budgets = tuple(
                Budget(
                    draw(st.integers(0, 4)) * UNITS_PER_HOUR // 4,
                    period,
                    draw(st.integers(0, 5)) * UNITS_PER_HOUR // 4,
                )
                for period in periods
            )
        cap, reclaims = None, ()
        if draw(st.integers(0, 3)) == 0:
            cap = draw(st.integers(0, 3))
            reclaims = tuple(
                sorted(
                    NOW - timedelta(seconds=draw(st.integers(0, 3599)))
                    for _ in range(draw(st.integers(0, 3)))
                )
            )
        policies.append(
            dict(
                id=pid,
                res=res,
                lim=res + draw(st.integers(0, 12)) * 250,
                budgets=budgets,
                cap=cap,
                reclaims=reclaims,
            )
        )
    has_children = {parent[p["id"]] for p in policies}
    if zero_parent_reservations:
        for p in policies:
            if p["id"] in has_children:
                p["res"] = 0

    resources = []
    for pol in policies:
        for f in profiles:
            if draw(st.integers(0, 2)) and (f["sft"] or f["size"] <= pol["lim"]):
                resources.append(ComputeResource(f"{pol['id']}-{f['id']}", pol["id"], f["id"]))
    by_id = {p["id"]: p for p in policies}
    prof_by = {f["id"]: f for f in profiles}

    def chain(pid):
        while pid is not None:
            yield pid
            pid = parent[pid]

    tasks = []  # (kind, resource, size, pool, ago, preempting)
    occ = defaultdict(int)
    use = defaultdict(int)
    for _ in range(draw(st.integers(0, 10)) if resources else 0):
        r = draw(st.sampled_from(resources))
        f = prof_by[r.profile]
        size = draw(st.sampled_from(SIZES)) if f["sft"] else f["size"]
        pool = draw(st.sampled_from(f["pools"]))
        preempting = draw(st.integers(0, 5)) == 0
        if not preempting:
            if occ[pool] + size > caps[pool] or any(use[q] + size > by_id[q]["lim"] for q in chain(r.policy)):
                continue
            occ[pool] += size
            for q in chain(r.policy):
                use[q] += size
        tasks.append(("placed", r, size, pool, draw(st.integers(0, 3600)), preempting))
    for r in resources:
        f = prof_by[r.profile]
        for _ in range(draw(st.integers(0, 5))):
            tasks.append(
                ("waiting", r, draw(st.sampled_from(SIZES)) if f["sft"] else f["size"], None, 0, False)
            )
    seqs = draw(st.permutations(range(len(tasks))))

    placed, queues = [], defaultdict(list)
    for k, (kind, r, size, pool, ago, preempting) in enumerate(tasks):
        if kind == "placed":
            placed.append(
                PlacedTask(f"t{k}", r.id, pool, size, seqs[k], NOW - timedelta(seconds=ago), preempting)
            )
        else:
            queues[r.id].append(WaitingTask(f"t{k}", seqs[k], size))
    spend_caps = ()
    if draw(st.integers(0, 2)) == 0:
        spend_caps = (
            SpendCap(
                "cap",
                tuple(draw(st.lists(st.sampled_from(pool_ids), min_size=1, unique=True))),
                frozenset(draw(st.lists(st.sampled_from(list(by_id)), min_size=1, unique=True))),
                NOW + timedelta(days=draw(st.integers(1, 30))),
            ),
        )
    return Snapshot(
        NOW,
        tuple(
            Pool(
                p,
                caps[p],
                tuple(f["id"] for f in draw(st.permutations(profiles)) if p in f["pools"]),
                enabled[p],
            )
            for p in pool_ids
        ),
        tuple(
            Profile(
                f["id"],
                f["size"],
                f["pools"],
                tuple(draw(st.permutations(list(by_id)))),
                f["weight"],
                f["sft"],
                f["min_runtime_s"],
            )
            for f in profiles
        ),
        tuple(
            Policy(p["id"], p["res"], p["lim"], parent[p["id"]], p["budgets"], p["cap"], p["reclaims"])
            for p in policies
        ),
        tuple(resources),
        {rid: tuple(sorted(q, key=lambda t: t.seq)) for rid, q in queues.items()},
        tuple(sorted(placed, key=lambda t: (t.placed_at, t.seq))),
        draw(st.sampled_from([0, 60, 900])),
        spend_caps,
    )


class State:
    """The estate after a pass (or, with phases, after those phases), recomputed from the
    snapshot and the decisions only."""

    def __init__(self, s: Snapshot, d, phases=("fill", "reclaim", "lend")):
        self.s = s
        self.res = {r.id: r for r in s.resources}
        self.prof = {f.id: f for f in s.profiles}
        self.pol = {p.id: p for p in s.policies}
        self.pool = {p.id: p for p in s.pools}
        self.waiting = {t.id: (rid, t) for rid, q in s.waiting.items() for t in q}
        self.preempted = {p.task: p for p in d.preemptions}
        self.running = [t for t in s.placed if not t.preempting and t.id not in self.preempted]
        for p in d.placements:
            if p.phase in phases:
                rid, t = self.waiting[p.task]
                self.running.append(PlacedTask(t.id, rid, p.pool, t.size, t.seq, s.now))
        self.occ = defaultdict(int)
        self.U = defaultdict(int)
        self.rw = defaultdict(int)
        for t in self.running:
            self.occ[t.pool] += t.size
            for q in self.chain(self.res[t.resource].policy):
                self.U[q] += t.size
                self.rw[q] += self.weight(t.resource)
        self.stopping = defaultdict(list)  # work that goes back to its queue: not at its time limit
        for t in s.placed:
            ends = t.deadline is not None and t.deadline <= s.now
            if (t.preempting and not ends) or (t.id in self.preempted and not ends):
                self.stopping[t.resource].append(t)

    def chain(self, pid):
        while pid is not None:
            yield pid
            pid = self.pol[pid].parent

    def weight(self, rid):
        return self.prof[self.res[rid].profile].time_weight

    def windows_left(self, q):
        return [b.limit - b.used for b in self.pol[q].budgets]

    def budget_ok(self, rid):
        """The start check, in every window of the policy and of each budgeted ancestor."""
        w = self.weight(rid)
        if not w:
            return True
        for q in self.chain(self.res[rid].policy):
            for r in self.windows_left(q):
                if r <= 0 or (self.rw[q] and r < self.s.low_watermark_s * 1_000_000 * (self.rw[q] + w)):
                    return False
        return True

    def limits_ok(self, rid, size):
        return all(self.U[q] + size <= self.pol[q].limit for q in self.chain(self.res[rid].policy))

    def blocked(self, rid, t):
        return any((-x.priority, x.seq) < t.key and x.size <= t.size for x in self.stopping[rid])

    def room(self, pid):
        return self.pool[pid].capacity - self.occ[pid] if self.pool[pid].enabled else -1

    def capped(self, pid, rid):
        policy_id = self.res[rid].policy
        return any(pid in cap.pools and policy_id in cap.policies for cap in self.s.caps)


def freeable(st: State, pid: str, policy_id: str) -> int:
    """Borrowed GPUs on pool pid that reclaim may take, per policy newest first, for a task of
    `policy_id` (valid when no policy with children has a reservation); a lower bound where
    protection applies: work under its minimum runtime and all work of capped policies is left
    out."""
    total = 0
    by_policy = defaultdict(list)
    for t in st.running:
        protected = st.s.now - t.placed_at < timedelta(
            seconds=st.prof[st.res[t.resource].profile].min_runtime_s
        )
        capped = st.pol[st.res[t.resource].policy].max_preemptions_per_hour is not None
        if t.pool == pid and t.size and not protected and not capped:
            by_policy[st.res[t.resource].policy].append(t)
    for q, tasks in by_policy.items():
        if q in set(st.chain(policy_id)):
            continue
        excess = st.U[q] - st.pol[q].reservation
        for t in sorted(tasks, key=lambda t: (t.placed_at, t.seq), reverse=True):
            if excess > 0 and t.size <= excess:
                excess -= t.size
                total += t.size
    return total


def check_pass(s: Snapshot):
    validate(s)
    d = allocate(s)
    again = allocate(s)
    assert d == again and list(d.verdicts()) == list(again.verdicts()), "same snapshot, same decisions"
    st_ = State(s, d)

    placed_now = [p.task for p in d.placements]
    assert len(set(placed_now)) == len(placed_now), "placed twice"
    assert set(placed_now) <= set(st_.waiting), "placed something not waiting"
    runnable = {t.id for t in s.placed if not t.preempting}
    assert len(st_.preempted) == len(d.preemptions) and set(st_.preempted) <= runnable
    held = [v for v in d.verdicts() if v.rule == "dependency"]
    assert [(v.task, v.position, v.waits_for) for v in held] == [(h.id, 0, h.waits_for) for h in s.held]
    verdicts = [v for v in d.verdicts() if v.rule != "dependency"]
    assert sorted(v.task for v in verdicts) == sorted(set(st_.waiting) - set(placed_now)), "nothing lost"
    timed_out = {p.task for p in d.preemptions if p.reason == "time_limit"}
    assert timed_out == {t.id for t in s.placed if not t.preempting and t.deadline and t.deadline <= s.now}
    # Tasks of a capped array at its cap after the pass: passed over, whatever their verdict (a
    # task stopped after the time-limit and budget stops keeps its place until the next pass).
    in_array = defaultdict(int)
    stops = {p.task for p in d.preemptions if p.reason in ("time_limit", "budget")}
    for t in s.placed:
        if t.id in runnable and t.id not in stops:
            in_array[t.array] += 1
    for p in d.placements:
        in_array[st_.waiting[p.task][1].array] += 1
    full = {a for a, most in s.arrays.items() if in_array[a] >= most}
    array_held = {v.task for v in verdicts if st_.waiting[v.task][1].array in full}

    for pid in st_.pool:
        assert st_.occ[pid] <= st_.pool[pid].capacity, f"pool {pid} above its declared capacity"
        assert isinstance(st_.occ[pid], int)
    for q in st_.pol:
        assert st_.U[q] <= st_.pol[q].limit, f"policy {q} above its limit"
    for p in d.placements:
        rid = st_.waiting[p.task][0]
        assert st_.pool[p.pool].enabled and p.pool in st_.prof[st_.res[rid].profile].pools
        assert not st_.capped(p.pool, rid), f"{p.task} placed on {p.pool} past a reached spend cap"

    # Budgets: nothing weighted starts under a used-up budget; each start passed the start check
    # (checked against a lower bound of the rate: reclaim victims counted as already stopped).
    used_up = {q for q in st_.pol if any(r <= 0 for r in st_.windows_left(q))}
    rate = defaultdict(int)
    for t in s.placed:
        if not t.preempting and t.id not in st_.preempted:
            for q in st_.chain(st_.res[t.resource].policy):
                rate[q] += st_.weight(t.resource)
    for p in d.placements:
        rid, t = st_.waiting[p.task]
        w = st_.weight(rid)
        if w:
            for q in st_.chain(st_.res[rid].policy):
                for r in st_.windows_left(q):
                    assert r > 0 and (rate[q] == 0 or r >= s.low_watermark_s * 1_000_000 * (rate[q] + w))
                rate[q] += w
    budget_stops = [p for p in d.preemptions if p.reason == "budget"]
    should_stop = [
        t
        for t in s.placed
        if not t.preempting
        and t.id not in timed_out
        and st_.weight(t.resource)
        and used_up & set(st_.chain(st_.res[t.resource].policy))
    ]
    assert [p.task for p in budget_stops] == [t.id for t in reversed(should_stop)], (
        "used up: all, newest first"
    )

    # Reclaim: only for a reservation-eligible task placed in this pass, never below a reservation.
    # Eligibility is checked at the moment of each reclaim: the work placed before it in this pass
    # and the victims taken for it and before it (later placements, e.g. a child's own reclaim,
    # may raise the policy's usage afterwards).
    reclaimers = {p.task for p in d.placements if p.phase == "reclaim"}
    after_reclaim = State(s, d, phases=("fill", "reclaim"))
    done: set[str] = set()
    for p in d.placements:
        done.add(p.task)
        if p.phase != "reclaim":
            continue
        policy_id = st_.res[st_.waiting[p.task][0]].policy
        gone = {x.task for x in d.preemptions if x.reason in ("budget", "time_limit") or x.for_task in done}
        work = [(t.resource, t.size) for t in s.placed if not t.preempting and t.id not in gone]
        work += [(st_.waiting[task_id][0], st_.waiting[task_id][1].size) for task_id in done]
        used = sum(size for rid, size in work if policy_id in st_.chain(st_.res[rid].policy))
        assert used <= st_.pol[policy_id].reservation, (
            f"{p.task} reclaimed while its policy {policy_id} was not reservation-eligible"
        )
    # Anti-thrash: no reclaim victim before its profile's minimum runtime; no policy loses more
    # than its cap of reclaims in the sliding hour.
    placed_at = {t.id: t.placed_at for t in s.placed}
    lost = defaultdict(int)
    for p in d.preemptions:
        if p.reason == "reclaim":
            min_run = st_.prof[st_.res[p.resource].profile].min_runtime_s
            assert s.now - placed_at[p.task] >= timedelta(seconds=min_run), f"{p.task} reclaimed too soon"
            lost[st_.res[p.resource].policy] += 1
    for q, n in lost.items():
        cap = st_.pol[q].max_preemptions_per_hour
        if cap is not None:
            recent = [at for at in st_.pol[q].reclaims if at > s.now - timedelta(hours=1)]
            assert len(recent) + n <= max(cap, len(recent)), f"{q} lost more than {cap} in an hour"
            assert n == 0 or len(recent) + n <= cap
    for p in d.preemptions:
        if p.reason == "budget":
            assert p.window in {
                b.period for q in st_.chain(st_.res[p.resource].policy) for b in st_.pol[q].budgets
            }
        if p.reason == "reclaim":
            assert p.for_task in reclaimers
            victim = st_.res[p.resource].policy
            shared = set(st_.chain(st_.res[st_.waiting[p.for_task][0]].policy))
            for q in st_.chain(victim):
                if q == victim or q not in shared:
                    assert st_.U[q] >= st_.pol[q].reservation, f"reclaim took {q} below its reservation"

    # Order kept: in a queue, nothing is placed while a task ahead of it (priority, then seq) of the
    # same or smaller size waits.
    waiting_left = {v.task for v in verdicts if v.task not in array_held}
    for queue in s.waiting.values():
        left = [t for t in queue if t.id in waiting_left]
        for t in queue:
            if t.id in placed_now:
                assert not any(x.key < t.key and x.size <= t.size for x in left), f"order broken at {t.id}"

    # Reclaim complete: once reclaim is done, no reservation-eligible task waits while room, or
    # borrowed work that reclaim may take, would let it in. (Checked where only leaf policies have
    # reservations and no ancestor limit holds the task, so that per-policy sums are exact.)
    zero_parents = all(p.reservation == 0 for p in s.policies if any(c.parent == p.id for c in s.policies))
    positions = defaultdict(list)
    for v in verdicts:
        rid, t = st_.waiting[v.task]
        positions[rid].append(v.position)
        policy_id = st_.res[rid].policy
        listed = [p for p in st_.prof[st_.res[rid].profile].pools if st_.room(p) >= 0]
        pools = [p for p in listed if not st_.capped(p, rid)]
        assert v.rule in RULES
        if v.task in array_held:
            continue  # its array's cap holds it (test_arrays.py checks the rule)
        if not st_.blocked(rid, t) and st_.limits_ok(rid, t.size) and st_.budget_ok(rid):
            assert all(st_.room(p) < t.size for p in pools), f"{t.id} waits while it fits"
        r = after_reclaim
        eligible = r.U[policy_id] + t.size <= r.pol[policy_id].reservation
        if (
            zero_parents
            and eligible
            and not r.blocked(rid, t)
            and r.limits_ok(rid, t.size)
            and r.budget_ok(rid)
        ):
            for p in pools:
                assert r.room(p) + freeable(r, p, policy_id) < t.size, f"{t.id} could reclaim on {p}"
        if v.rule == "policy_limit":
            assert st_.U[policy_id] + t.size > st_.pol[policy_id].limit
        if v.rule == "ancestor_limit":
            assert st_.U[v.policy] + t.size > st_.pol[v.policy].limit
        if v.rule == "no_capacity":
            assert all(st_.room(p) < t.size for p in pools) and pools == listed
        if v.rule == "cloud_cap_reached":
            assert all(st_.room(p) < t.size for p in pools), f"{t.id}: capped while an open pool has room"
            assert v.pools and all(p in listed and st_.capped(p, rid) for p in v.pools)
            assert v.reset_at == s.caps[0].resets_at
        if v.rule == "budget_used_up":
            assert v.policy in used_up
            assert v.cause in {b.period for b in st_.pol[v.policy].budgets if b.limit <= b.used}
        sizes = [st_.pool[p].capacity for p in st_.prof[st_.res[rid].profile].pools if st_.pool[p].enabled]
        assert (v.rule == "never_fits") == (not sizes or max(sizes) < t.size), f"{t.id}: never_fits is wrong"
        if v.rule == "reclaim_held":
            assert v.reset_at > s.now and v.cause in ("min_runtime", "max_preemptions")
    for got in positions.values():
        assert got == list(range(1, len(got) + 1))
    return d


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(estates())
def test_every_invariant_holds_for_one_pass_over_random_estates(s):
    check_pass(s)


@st.composite
def scenarios(draw):
    pools = [{"name": f"P{i}", "capacity": draw(st.integers(0, 6))} for i in range(draw(st.integers(1, 3)))]
    names = [p["name"] for p in pools]
    profiles = []
    for i in range(draw(st.integers(1, 3))):
        order = draw(st.permutations(names))
        profiles.append(
            {
                "name": f"F{i}",
                "gpus": draw(st.sampled_from([1, 0.5, 2])),
                "time_weight": draw(st.sampled_from([0, 1, 2])),
                "size_from_task": draw(st.booleans()),
                "pools": order[: draw(st.integers(1, len(order)))],
                "min_runtime_s": draw(st.sampled_from([0, 0, 5, 20])),
            }
        )
    policies = []
    for i in range(draw(st.integers(1, 4))):
        res = draw(st.integers(0, 4))
        p = {
            "name": f"Q{i}",
            "reservation": res,
            "limit": res + draw(st.integers(2, 4)),
            "parent": draw(st.sampled_from([None] + [q["name"] for q in policies])),
        }
        if draw(st.integers(0, 2)) == 0:
            p["budget"] = {"hours": draw(st.sampled_from([0.01, 0.02, 0.05])), "period": "day"}
        elif draw(st.integers(0, 3)) == 0:
            p["budgets"] = [
                {"hours": draw(st.sampled_from([0.01, 0.02])), "period": "day"},
                {"hours": draw(st.sampled_from([0.01, 0.03])), "period": "week"},
            ]
        if draw(st.integers(0, 2)) == 0:
            p["max_preemptions_per_hour"] = draw(st.integers(0, 2))
        policies.append(p)
    resources = [
        {"name": f"{p['name']}-{f['name']}", "policy": p["name"], "profile": f["name"]}
        for p in policies
        for f in profiles
        if f["gpus"] <= p["limit"] and draw(st.booleans())
    ]
    if not resources:
        resources = [{"name": "only", "policy": policies[0]["name"], "profile": profiles[0]["name"]}]
        profiles[0]["gpus"] = 1
    events = []
    for k in range(draw(st.integers(1, 25))):
        r = draw(st.sampled_from(resources))
        sub = {
            "id": f"t{k}",
            "resource": r["name"],
            "duration_s": draw(st.integers(1, 40)),
            "checkpoint": draw(st.booleans()),
        }
        if next(f for f in profiles if f["name"] == r["profile"])["size_from_task"]:
            sub["gpus"] = draw(st.sampled_from([0.5, 1, 2]))
        events.append({"at": draw(st.integers(0, 30)), "submit": sub})
    if draw(st.booleans()):
        events.append({"at": draw(st.integers(0, 30)), "engine": "disable"})
        events.append({"at": draw(st.integers(30, 50)), "engine": "enable"})
    return {
        "start": "2025-01-06T23:59:30Z",
        "duration_s": 80,
        "pass_interval_s": draw(st.sampled_from([1, 0.5])),
        "low_watermark_s": draw(st.sampled_from([0, 10, 60])),
        "pools": pools,
        "profiles": profiles,
        "policies": policies,
        "compute_resources": resources,
        "events": events,
    }


class CheckedSimulation(Simulation):
    def _pass(self, t):
        d = check_pass(self.snapshot(t))
        self.apply(d, t)
        return bool(d.placements or d.preemptions)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_every_invariant_holds_on_every_pass_of_random_simulated_runs(data):
    lines = list(CheckedSimulation(parse(data), parse(data).duration_us).run())
    summary = lines[-1]["summary"]
    submitted = {e["submit"]["id"] for e in data["events"] if "submit" in e}
    assert set(summary["tasks"]) == submitted
    for e in lines[:-1]:
        assert e["task"] in submitted
    # The run is shorter than an hour: a capped policy loses at most its cap to reclaim in all.
    policy_of = {r["name"]: r["policy"] for r in data["compute_resources"]}
    resource_of = {e["submit"]["id"]: e["submit"]["resource"] for e in data["events"] if "submit" in e}
    lost = defaultdict(int)
    for e in lines[:-1]:
        if e["event"] == "preempted" and e["reason"] == "reclaim":
            lost[policy_of[resource_of[e["task"]]]] += 1
    for p in data["policies"]:
        if "max_preemptions_per_hour" in p:
            assert lost[p["name"]] <= p["max_preemptions_per_hour"], f"{p['name']} lost more than its cap"
    for task, line in summary["tasks"].items():
        if line["state"] == "rejected":
            assert any(e.get("event") == "rejected" and e["task"] == task for e in lines[:-1])
    for pool in summary["pools"].values():
        assert 0 <= pool["utilization"] <= 1
