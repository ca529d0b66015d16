"""The simulator's maintenance windows and dated quota loans (issue 35, rules 3 and 4): a pool's
`maintenance`, a profile's `unlimited_before_maintenance`, the `loan` event. Bad input is refused
by its path; the clock wakes at each window's start and end; work stopped for maintenance goes
back at the front of its queue; a loan moves its amount at its event and back at its `until`."""

import copy

import pytest

from apps.engine.core.scenario import parse
from apps.engine.core.scenario_model import ScenarioError
from apps.engine.core.simulation import Simulation

US = 1_000_000
BASE = {
    "start": "2025-01-06T00:00:00Z",
    "duration_s": 400,
    "pools": [{"name": "onprem", "capacity": 2}, {"name": "spare", "capacity": 1}],
    "profiles": [{"name": "gpu", "gpus": 1, "pools": ["onprem"]}],
    "policies": [
        {"name": "A", "reservation": 1, "limit": 2},
        {"name": "B", "reservation": 1, "limit": 2},
    ],
    "compute_resources": [
        {"name": "a", "policy": "A", "profile": "gpu"},
        {"name": "b", "policy": "B", "profile": "gpu"},
    ],
    "events": [],
}


def scenario(events=(), windows=None, profile=None, policies=None, **top):
    s = copy.deepcopy(BASE)
    if windows is not None:
        s["pools"][0]["maintenance"] = windows
    s["profiles"][0] |= profile or {}
    if policies is not None:
        s["policies"] = policies
    s["events"] = list(events)
    return s | top


def submit(task, at=0, resource="a", duration_s=100, **extra):
    return {"at": at, "submit": {"id": task, "resource": resource, "duration_s": duration_s} | extra}


def loan(at=10, until=100, source="B", to="A", **amount):
    return {"at": at, "loan": {"from": source, "to": to, "until": until} | (amount or {"reservation": 1})}


def run(sc: dict, until_s: int | None = None) -> list[dict]:
    parsed = parse(sc)
    return list(Simulation(parsed, parsed.duration_us if until_s is None else until_s * US).run())


def events(lines) -> list[tuple]:
    return [(e["at"], e["task"], e["event"], e.get("pool") or e.get("reason")) for e in lines if "task" in e]


def refused(sc: dict) -> str:
    with pytest.raises(ScenarioError) as e:
        parse(sc)
    return str(e.value)


# -- maintenance windows ------------------------------------------------------------------------


def test_maintenance_fields_are_read_in_start_order_with_their_note():
    sc = parse(scenario([], [{"start": 300, "end": 350}, {"start": 100, "end": 200, "note": "bios"}]))
    assert [(w.start_us, w.end_us, w.note) for w in sc.pools[0].maintenance] == [
        (100 * US, 200 * US, "bios"),
        (300 * US, 350 * US, None),
    ]
    assert sc.profiles[0].unlimited_before_maintenance is False
    assert (
        parse(scenario(profile={"unlimited_before_maintenance": True}))
        .profiles[0]
        .unlimited_before_maintenance
    )


@pytest.mark.parametrize(
    "windows, message",
    [
        ({"start": 1, "end": 2}, "pools[0].maintenance: must be a list"),
        ([{"start": 5, "end": 5}], "pools[0].maintenance[0].end: must be after its start"),
        ([{"start": 5}], "pools[0].maintenance[0].end: required"),
        ([{"start": -1, "end": 5}], "pools[0].maintenance[0].start: must be >= 0, got -1"),
        ([{"start": 1, "end": 5, "why": "x"}], "pools[0].maintenance[0].why: unknown field"),
        ([{"start": 1, "end": 5, "note": 3}], "pools[0].maintenance[0].note: must be a string"),
        (
            [{"start": 10, "end": 20}, {"start": 0, "end": 11}],
            "pools[0].maintenance[0]: overlaps pools[0].maintenance[1]",
        ),
    ],
)
def test_maintenance_bad_windows_are_refused_by_path(windows, message):
    assert refused(scenario([], windows)) == message


def test_maintenance_on_a_cloud_pool_is_refused_and_windows_may_touch():
    cloud = {"boot_s": 10, "idle_timeout_s": 60, "types": [{"name": "g", "gpus": 1, "max": 2}]}
    sc = scenario()
    sc["pools"].append({"name": "burst", "cloud": cloud, "maintenance": []})
    assert refused(sc) == "pools[2].maintenance: a cloud pool has no maintenance windows"
    parse(scenario([], [{"start": 10, "end": 20}, {"start": 20, "end": 30}]))
    assert refused(scenario(profile={"unlimited_before_maintenance": 1})) == (
        "profiles[0].unlimited_before_maintenance: must be true or false"
    )


def test_maintenance_the_clock_wakes_at_the_window_start_and_end():
    """Nothing else happens between 0 s and 300 s: the preemption at 100.5 s and the placement at
    200.5 s come from waking at the window's bounds (passes every 0.5 s)."""
    sc = scenario([submit("a1", duration_s=300, time_limit_s=None)], [{"start": 100.5, "end": 200.5}])
    sc["profiles"][0]["unlimited_before_maintenance"] = True
    sc["events"][0]["submit"].pop("time_limit_s")
    sc["pass_interval_s"] = 0.5
    assert events(run(sc)) == [
        (0, "a1", "placed", "onprem"),
        (100.5, "a1", "preempted", "maintenance"),
        (200.5, "a1", "placed", "onprem"),
    ]


def test_maintenance_requeues_at_the_front_of_its_priority_keeping_the_order_of_those_stopped_together():
    """a1 and a2 run on onprem; a3 (submitted after them) and a4 wait; at the window's start a1 and
    a2 go back before a3 and a4 (seqs below the smallest waiting one, in their old order), so when
    the window ends they start first. a5, of a higher priority, still goes before them."""
    sc = scenario(
        [
            submit("a1", duration_s=500),
            submit("a2", duration_s=500),
            submit("a3", duration_s=10),
            submit("a4", duration_s=10),
            submit("a5", at=150, duration_s=10, priority=1),
        ],
        [{"start": 100, "end": 200}],
        profile={"unlimited_before_maintenance": True},
        duration_s=260,
    )
    sc["policies"][0]["reservation"] = 2
    sc["policies"][1]["reservation"] = 0
    assert events(run(sc)) == [
        (0, "a1", "placed", "onprem"),
        (0, "a2", "placed", "onprem"),
        (100, "a1", "preempted", "maintenance"),
        (100, "a2", "preempted", "maintenance"),
        (200, "a5", "placed", "onprem"),
        (200, "a1", "placed", "onprem"),
        (210, "a5", "completed", None),
        (210, "a2", "placed", "onprem"),
    ]


def test_maintenance_a_time_limit_left_counts_the_running_time_so_far():
    """b1 (limit 150 s, checkpointed) ran 60 s before a reclaim: with 90 s left it fits before the
    window at 200 s when it comes back at 100 s (100 + 90 <= 200); b2 (limit 150 s, never run)
    does not, and waits for the window's end."""
    sc = scenario(
        [
            submit("b1", resource="b", duration_s=100, time_limit_s=150, checkpoint=True),
            submit("b2", resource="b", duration_s=10, time_limit_s=150),
            submit("a1", at=60, duration_s=40, time_limit_s=50),
        ],
        [{"start": 200, "end": 250}],
        duration_s=300,
    )
    sc["policies"][1]["reservation"] = 0
    sc["pools"][0]["capacity"] = 1
    got = events(run(sc))
    assert got[:5] == [
        (0, "b1", "placed", "onprem"),
        (60, "b1", "preempted", "reclaim"),
        (60, "a1", "placed", "onprem"),
        (100, "a1", "completed", None),
        (100, "b1", "placed", "onprem"),
    ]
    assert (250, "b2", "placed", "onprem") in got


def test_maintenance_snapshots_hold_only_the_windows_not_yet_ended():
    sc = parse(scenario([], [{"start": 10, "end": 20}, {"start": 30, "end": 40}]))
    sim = Simulation(sc, sc.duration_us)
    assert len(sim.snapshot(0).pools[0].maintenance) == 2
    assert len(sim.snapshot(20 * US).pools[0].maintenance) == 1
    assert sim.snapshot(40 * US).pools[0].maintenance == ()


# -- dated quota loans ---------------------------------------------------------------------------


def test_loan_of_reservation_applies_at_its_start_and_goes_back_at_until():
    """B (reservation 1) lends A (reservation 0) 1 GPU of reservation from 10 s to 100 s: at 20 s
    A's a1 reclaims from B (then 2 above its reservation of 0); at 150 s, after the loan, A has no
    reservation to reclaim with and a3 waits."""
    sc = scenario(
        [
            submit("b1", resource="b", duration_s=300),
            submit("b2", resource="b", duration_s=300),
            loan(),
            submit("a1", at=20, duration_s=50),
            submit("a3", at=150, duration_s=50),
        ],
        duration_s=200,
    )
    sc["policies"][0]["reservation"] = 0
    sc["policies"][0]["limit"] = 2
    got = events(run(sc))
    assert got == [
        (0, "b1", "placed", "onprem"),
        (0, "b2", "placed", "onprem"),
        (20, "b2", "preempted", "reclaim"),
        (20, "a1", "placed", "onprem"),
        (70, "a1", "completed", None),
        (70, "b2", "placed", "onprem"),
    ]
    sim = Simulation(parse(sc), 200 * US)
    list(sim.run())
    assert sim.reservation == [0, 1000]


def test_loan_of_limit_and_its_end_while_the_engine_is_disabled():
    sc = scenario(
        [
            loan(at=0, until=50, limit=1, source="B", to="A"),
            {"at": 40, "engine": "disable"},
        ],
    )
    sc["policies"][0]["limit"] = 1
    parsed = parse(sc)
    sim = Simulation(parsed, 60 * US)
    it = sim.run()
    list(it)
    assert sim.limit == [1000, 2000]  # back at 50 s although the engine was off
    sim = Simulation(parsed, 45 * US)
    list(sim.run())
    assert sim.limit == [2000, 1000]


def test_loan_of_budget_hours_moves_the_window_limit():
    policies = [
        {"name": "A", "reservation": 1, "limit": 2, "budget": {"hours": 1, "period": "day"}},
        {
            "name": "B",
            "reservation": 1,
            "limit": 2,
            "budgets": [{"hours": 5, "period": "day"}, {"hours": 9, "period": "week"}],
        },
    ]
    sc = scenario([loan(budget_hours=2, period="day")], policies=policies)
    sim = Simulation(parse(sc), 50 * US)
    list(sim.run())
    assert [a.limit for a in sim.accounts[0]] == [3 * 3600 * 10**9]
    assert [a.limit for a in sim.accounts[1]] == [3 * 3600 * 10**9, 9 * 3600 * 10**9]
    assert refused(scenario([loan(budget_hours=2)], policies=policies)).startswith(
        "events[0].loan.period: policy 'B' has several budget windows"
    )
    assert refused(scenario([loan(budget_hours=2, period="week")], policies=policies)) == (
        "events[0].loan.to: policy 'A' has no 'week' budget window"
    )


@pytest.mark.parametrize(
    "event, message",
    [
        (loan(source="A", to="A"), "events[0].loan.to: policy 'A' cannot lend to itself"),
        (loan(source="X"), "events[0].loan.from: unknown policy 'X'"),
        (loan(until=10), "events[0].loan.until: must be after the loan's start (10 s)"),
        (
            loan(reservation=1, limit=1),
            "events[0].loan: needs exactly one of reservation, limit, budget_hours",
        ),
        (loan(reservation=0), "events[0].loan.reservation: must be > 0"),
        (loan(reservation=1, period="day"), "events[0].loan.period: only a budget_hours loan names a period"),
        (loan(budget_hours=1), "events[0].loan.from: policy 'B' has no budget to lend"),
        (
            loan(reservation=2),
            "events[0].loan.reservation: at its start, policy 'B' would have less than nothing "
            "(reservation below 0 GPUs)",
        ),
        (
            loan(limit=1.5),
            "events[0].loan.limit: at its start, policy 'B' would have a limit of 0.5 GPUs below its "
            "reservation of 1 GPU",
        ),
        (
            loan(reservation=1.5, source="B", to="A"),
            "events[0].loan.reservation: at its start, policy 'B' would have less than nothing "
            "(reservation below 0 GPUs)",
        ),
    ],
)
def test_loan_bad_input_is_refused_by_path(event, message):
    assert refused(scenario([event])) == message


def test_loan_is_refused_when_either_side_breaks_its_envelope_at_the_end():
    """B lends A 1 GPU of limit until 100 s; at 50 s A's reservation is raised to 3 GPUs (within
    its loaned limit of 3): at the loan's end A's limit of 2 would be below it."""
    sc = scenario([loan(limit=1), {"at": 50, "set_reservation": {"policy": "A", "reservation": 3}}])
    sc["policies"][1]["limit"] = 3
    assert refused(sc) == (
        "events[0].loan.limit: at its end (100 s), policy 'A' would have a limit of 2 GPUs below its "
        "reservation of 3 GPUs"
    )
    ok = scenario([loan(limit=1), {"at": 150, "set_reservation": {"policy": "A", "reservation": 2}}])
    ok["policies"][1]["limit"] = 3
    parse(ok)


def test_loan_a_child_within_its_parent_at_the_start():
    policies = [
        {"name": "dept", "reservation": 2, "limit": 2},
        {"name": "A", "reservation": 1, "limit": 2, "parent": "dept"},
        {"name": "B", "reservation": 1, "limit": 2},
    ]
    sc = scenario([loan(limit=1)], policies=policies)
    assert refused(sc) == (
        "events[0].loan.limit: at its start, policy 'A' would have a limit of 3 GPUs above the limit of "
        "its parent 'dept' (2 GPUs)"
    )
    policies[0]["reservation"] = 1.5
    sc = scenario([loan(reservation=1)], policies=policies)
    assert refused(sc) == (
        "events[0].loan.reservation: at its start, the reservations of 'dept''s children would sum to "
        "2 GPUs, above its reservation of 1.5 GPUs"
    )


def test_loan_overlapping_loans_each_go_back_at_their_end():
    sc = scenario([loan(at=0, until=30, limit=0.5), loan(at=10, until=20, limit=0.5)])
    parsed = parse(sc)
    for until_s, limits in ((15, [3000, 1000]), (25, [2500, 1500]), (35, [2000, 2000])):
        sim = Simulation(parsed, until_s * US)
        list(sim.run())
        assert sim.limit == limits
