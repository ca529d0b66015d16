"""The simulator's issue-34 fields (docs/engine.md section 8): a policy's `lending`,
`over_quota_weight` and `lendable`, a profile's `starvation_s` and a submit's `priority` are read
strictly (bad input refused by its path), reach the snapshot the engine sees, and keep each queue in
queue order (higher priority first, then seq); a requeued task keeps its priority and first submit
time. Absent, they leave the snapshot as before."""

import copy
import json
from datetime import UTC, datetime, timedelta

import pytest

from apps.engine.core.decisions import Decisions, Preemption
from apps.engine.core.scenario import loads, parse
from apps.engine.core.scenario_model import ScenarioError
from apps.engine.core.simulation import Simulation
from apps.engine.core.snapshot import validate

START = datetime(2025, 1, 6, tzinfo=UTC)
BASE = {
    "start": "2025-01-06T00:00:00Z",
    "duration_s": 100,
    "pools": [{"name": "onprem", "capacity": 2}],
    "profiles": [{"name": "gpu", "gpus": 1, "pools": ["onprem"]}],
    "policies": [
        {"name": "dept", "reservation": 2, "limit": 4},
        {"name": "A", "parent": "dept", "reservation": 0, "limit": 4},
        {"name": "B", "parent": "dept", "reservation": 2, "limit": 2},
    ],
    "compute_resources": [
        {"name": "a", "policy": "A", "profile": "gpu"},
        {"name": "b", "policy": "B", "profile": "gpu"},
    ],
    "events": [],
}


def scenario(policies=None, profile=None, events=()):
    s = copy.deepcopy(BASE)
    for i, extra in (policies or {}).items():
        s["policies"][i] |= extra
    s["profiles"][0] |= profile or {}
    s["events"] = list(events)
    return s


def submit(task, at=0, resource="a", **extra):
    return {"at": at, "submit": {"id": task, "resource": resource, "duration_s": 1000} | extra}


def sim_at(sc: dict, t_s: int) -> Simulation:
    """The simulation run up to t_s (its last step's lines consumed)."""
    sim = Simulation(parse(sc), t_s * 1_000_000)
    for _ in sim.run():
        pass
    return sim


def test_absent_fields_are_the_defaults_the_engine_had_before():
    sc = parse(scenario(events=[submit("t1")]))
    assert [(p.lending, p.over_quota_weight, p.lendable) for p in sc.policies] == [
        ("priority", 1000, None)
    ] * 3
    assert sc.profiles[0].starvation_s is None
    assert sc.events[0].what.priority == 0
    snap = sim_at(scenario(events=[submit("t1")]), 0).snapshot(0)
    assert [(p.lending, p.over_quota_weight, p.lendable) for p in snap.policies] == [
        ("priority", 1000, None)
    ] * 3
    assert snap.profiles[0].starvation_s is None
    assert [(t.id, t.priority) for t in snap.placed] == [("t1", 0)]


def test_each_field_is_read_in_exact_units_and_reaches_the_snapshot():
    sc = scenario(
        policies={0: {"lending": "fair"}, 1: {"over_quota_weight": 2.5}, 2: {"lendable": 1.5}},
        profile={"starvation_s": 600},
        events=[{"at": 0, "engine": "disable"}, submit("t1", priority=-3)],
    )
    parsed = parse(sc)
    assert [(p.lending, p.over_quota_weight, p.lendable) for p in parsed.policies] == [
        ("fair", 1000, None),
        ("priority", 2500, None),
        ("priority", 1000, 1500),
    ]
    assert parsed.profiles[0].starvation_s == 600
    assert parsed.events[1].what.priority == -3
    snap = sim_at(sc, 5).snapshot(5_000_000)
    validate(snap)
    assert [(p.id, p.lending, p.over_quota_weight, p.lendable) for p in snap.policies] == [
        ("dept", "fair", 1000, None),
        ("A", "priority", 2500, None),
        ("B", "priority", 1000, 1500),
    ]
    assert snap.profiles[0].starvation_s == 600
    assert [(t.id, t.priority, t.since) for t in snap.waiting["a"]] == [("t1", -3, START)]


def test_a_weight_of_zero_and_a_lendable_of_the_whole_reservation_or_nothing_are_allowed():
    parsed = parse(scenario(policies={1: {"over_quota_weight": 0}, 2: {"lendable": 2}, 0: {"lendable": 0}}))
    assert [(p.over_quota_weight, p.lendable) for p in parsed.policies] == [
        (1000, 0),
        (0, None),
        (1000, 2000),
    ]


BAD = [
    ({"policies": {1: {"lending": "fast"}}}, 'policies[1].lending: must be "priority" or "fair"'),
    ({"policies": {1: {"lending": None}}}, 'policies[1].lending: must be "priority" or "fair"'),
    ({"policies": {2: {"over_quota_weight": -1}}}, "policies[2].over_quota_weight: must be >= 0, got -1"),
    ({"policies": {2: {"over_quota_weight": "2"}}}, "policies[2].over_quota_weight: must be a number"),
    (
        {"policies": {2: {"over_quota_weight": 0.0001}}},
        "policies[2].over_quota_weight: must be a multiple of 0.001",
    ),
    ({"policies": {2: {"lendable": 3}}}, "policies[2].lendable: 3 GPUs is above the reservation of 2 GPUs"),
    ({"policies": {1: {"lendable": 1}}}, "policies[1].lendable: 1 GPU is above the reservation of 0 GPUs"),
    ({"policies": {2: {"lendable": -1}}}, "policies[2].lendable: must be >= 0, got -1"),
    ({"policies": {2: {"lendable": True}}}, "policies[2].lendable: must be a number"),
    ({"profile": {"starvation_s": 1.5}}, "profiles[0].starvation_s: must be a whole number >= 0"),
    ({"profile": {"starvation_s": -1}}, "profiles[0].starvation_s: must be a whole number >= 0"),
    ({"profile": {"starvation_s": True}}, "profiles[0].starvation_s: must be a whole number >= 0"),
    (
        {"events": [submit("t1", priority=1.5)]},
        "events[0].submit.priority: must be a whole number (negative allowed)",
    ),
    (
        {"events": [submit("t1", priority=True)]},
        "events[0].submit.priority: must be a whole number (negative allowed)",
    ),
    (
        {"events": [submit("t1", priority="high")]},
        "events[0].submit.priority: must be a whole number (negative allowed)",
    ),
    (
        {"events": [submit("t1", priority=None)]},
        "events[0].submit.priority: must be a whole number (negative allowed)",
    ),
    (
        {"events": [submit("t1", priority=2**31)]},
        "events[0].submit.priority: must be between -2147483647 and 2147483647",
    ),
]


@pytest.mark.parametrize(("change", "message"), BAD)
def test_bad_input_is_refused_by_its_path(change, message):
    with pytest.raises(ScenarioError) as e:
        parse(scenario(change.get("policies"), change.get("profile"), change.get("events", ())))
    assert str(e.value) == message


def test_a_reservation_set_below_the_lendable_lends_at_most_the_reservation():
    sc = scenario(
        policies={2: {"lendable": 1.5}},
        events=[{"at": 5, "set_reservation": {"policy": "B", "reservation": 1}}],
    )
    assert sim_at(sc, 0).snapshot(0).policies[2].lendable == 1500
    snap = sim_at(sc, 5).snapshot(5_000_000)
    validate(snap)
    assert (snap.policies[2].reservation, snap.policies[2].lendable) == (1000, 1000)


def test_a_whole_priority_written_as_a_decimal_is_read_as_an_integer():
    sc = scenario(events=[submit("t1", priority=7)])
    text = json.dumps(sc).replace('"priority": 7', '"priority": 7.0')
    assert loads(text).events[0].what.priority == 7


def test_each_queue_is_in_queue_order_higher_priority_first_then_submit_order():
    sc = scenario(
        events=[
            {"at": 0, "engine": "disable"},
            submit("t1", at=1),
            submit("t2", at=2, priority=10),
            submit("t3", at=3, priority=-1),
            submit("t4", at=4, priority=10),
            submit("t5", at=5),
        ]
    )
    snap = sim_at(sc, 6).snapshot(6_000_000)
    validate(snap)
    assert [(t.id, t.priority, t.since) for t in snap.waiting["a"]] == [
        ("t2", 10, START + timedelta(seconds=2)),
        ("t4", 10, START + timedelta(seconds=4)),
        ("t1", 0, START + timedelta(seconds=1)),
        ("t5", 0, START + timedelta(seconds=5)),
        ("t3", -1, START + timedelta(seconds=3)),
    ]


def test_a_requeued_task_goes_back_by_its_key_keeping_its_priority_and_first_submit_time():
    """A borrows both GPUs of B's reservation (a1 priority 5, a2 priority 0); a3 (priority 1) waits;
    neither A nor its parent is at its limit, so it preempts nothing by priority. B's two tasks at
    20 s reclaim both, newest first. A's queue is then a1, a3, a2, each with the
    time it was first submitted, and the placed work carries its priority."""
    sc = scenario(
        events=[
            submit("a1", priority=5),
            submit("a2"),
            submit("a3", at=10, priority=1),
            submit("b1", at=20, resource="b"),
            submit("b2", at=20, resource="b"),
        ]
    )
    sim = Simulation(parse(sc), 30 * 1_000_000)
    lines = [x for x in sim.run() if "summary" not in x]
    assert [(x["at"], x["task"], x["event"], x.get("reason")) for x in lines] == [
        (0, "a1", "placed", None),
        (0, "a2", "placed", None),
        (20, "a2", "preempted", "reclaim"),
        (20, "a1", "preempted", "reclaim"),
        (20, "b1", "placed", None),
        (20, "b2", "placed", None),
    ]
    snap = sim.snapshot(30 * 1_000_000)
    validate(snap)
    assert [(t.id, t.priority, t.since) for t in snap.waiting["a"]] == [
        ("a1", 5, START),
        ("a3", 1, START + timedelta(seconds=10)),
        ("a2", 0, START),
    ]
    assert [(t.id, t.priority) for t in snap.placed] == [("b1", 0), ("b2", 0)]


def test_priority_and_fair_share_preemptions_are_recorded_and_fair_share_counts_against_the_cap():
    """The pass's reasons reach the output lines as they are; a fair_share preemption, like a
    reclaim, counts against the victim policy's max_preemptions_per_hour, a priority one does not."""
    sc = scenario(
        policies={1: {"max_preemptions_per_hour": 5}},
        events=[submit("a1"), submit("a2", priority=1)],
    )
    sim = sim_at(sc, 0)
    sim.apply(
        Decisions(
            (),
            (
                Preemption("a1", "a", "onprem", "priority"),
                Preemption("a2", "a", "onprem", "fair_share", for_task="x"),
            ),
            None,
        ),
        1_000_000,
    )
    assert [(x["task"], x["event"], x["reason"]) for x in sim.lines] == [
        ("a1", "preempted", "priority"),
        ("a2", "preempted", "fair_share"),
    ]
    assert sim.reclaims[1] == [1_000_000]
    snap = sim.snapshot(1_000_000)
    assert [(t.id, t.priority) for t in snap.waiting["a"]] == [("a2", 1), ("a1", 0)]
    assert snap.policies[1].reclaims == (START + timedelta(seconds=1),)


class PassTimes(Simulation):
    def _pass(self, t):
        self.passes.append(t // 1_000_000)
        return super()._pass(t)


def pass_times(sc: dict) -> list[int]:
    sim = PassTimes(parse(sc), 100 * 1_000_000)
    sim.passes = []
    for _ in sim.run():
        pass
    return sim.passes


def test_a_starvation_guard_wakes_the_clock_when_a_queued_task_has_waited_it_out():
    """The clock skips steps where nothing can change; with starvation_s it does not skip the moment
    a queued task has waited it out (from its submit), so the pass sees the guard start then."""
    events = [submit("a1"), submit("a2"), submit("t1", at=7)]
    assert 37 in pass_times(scenario(profile={"starvation_s": 30}, events=events))
    assert 37 not in pass_times(scenario(events=events))
