"""The simulator's issue-35 fields (docs/engine.md section 8): time limits (`time_limit_s` on a
submit, `default_time_limit_s` / `max_time_limit_s` on a profile and a compute resource), the
dependencies `after_ok` / `after_any` and arrays (`array`, `max_running`). Bad input is refused by
its path; the runs end tasks timed_out and dependency_failed as the live engine does."""

import copy
import json

import pytest

from apps.engine.core import allocate
from apps.engine.core.scenario import parse
from apps.engine.core.scenario_model import ScenarioError
from apps.engine.core.simulation import Simulation

US = 1_000_000
BASE = {
    "start": "2025-01-06T00:00:00Z",
    "duration_s": 200,
    "description": "issue 35",
    "pools": [{"name": "onprem", "capacity": 2}],
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


def scenario(events=(), profile=None, resource=None, pools=None):
    s = copy.deepcopy(BASE)
    s["profiles"][0] |= profile or {}
    s["compute_resources"][0] |= resource or {}
    if pools is not None:
        s["pools"] = pools
    s["events"] = list(events)
    return s


def submit(task, at=0, resource="a", duration_s=100, **extra):
    return {"at": at, "submit": {"id": task, "resource": resource, "duration_s": duration_s} | extra}


def run(sc: dict, until_s: int | None = None) -> list[dict]:
    parsed = parse(sc)
    return list(Simulation(parsed, parsed.duration_us if until_s is None else until_s * US).run())


def events(lines) -> list[tuple]:
    return [(e["at"], e["task"], e["event"], e.get("reason")) for e in lines if "task" in e]


def limits(sc: dict) -> dict[str, int | None]:
    return {e.what.id: e.what.time_limit_us for e in parse(sc).events}


# -- time limits --------------------------------------------------------------------------------


def test_time_limit_resolution_asked_default_maximum_and_the_resource_over_its_profile():
    tasks = [submit("asked", time_limit_s=40), submit("none"), submit("other", resource="b")]
    assert limits(scenario(tasks)) == {"asked": 40 * US, "none": None, "other": None}
    profile = {"default_time_limit_s": 50, "max_time_limit_s": 60}
    assert limits(scenario(tasks, profile)) == {"asked": 40 * US, "none": 50 * US, "other": 50 * US}
    resource = {"default_time_limit_s": 45}
    assert limits(scenario(tasks, profile, resource)) == {"asked": 40 * US, "none": 45 * US, "other": 50 * US}
    resource = {"default_time_limit_s": 90}  # above the profile's maximum: the maximum
    assert limits(scenario(tasks, profile, resource))["none"] == 60 * US
    only_max = {"max_time_limit_s": 70}
    assert limits(scenario(tasks, only_max)) == {"asked": 40 * US, "none": 70 * US, "other": 70 * US}
    assert limits(scenario([submit("s", kind="session")], only_max)) == {"s": None}


@pytest.mark.parametrize(
    "sc, message",
    [
        (
            scenario([submit("t", time_limit_s=61)], {"max_time_limit_s": 60}),
            "events[0].submit.time_limit_s: 61 s is above the maximum of 60 s on compute resource 'a'",
        ),
        (
            scenario([submit("t", time_limit_s=31)], {"max_time_limit_s": 60}, {"max_time_limit_s": 30}),
            "events[0].submit.time_limit_s: 31 s is above the maximum of 30 s on compute resource 'a'",
        ),
        (scenario([submit("t", time_limit_s=0)]), "events[0].submit.time_limit_s: must be from 1 to"),
        (scenario([submit("t", time_limit_s=1.5)]), "events[0].submit.time_limit_s: must be a whole number"),
        (scenario([submit("t", time_limit_s=True)]), "events[0].submit.time_limit_s: must be a whole number"),
        (scenario([submit("t", time_limit_s="1h")]), "events[0].submit.time_limit_s: must be a whole number"),
        (scenario([submit("t", time_limit_s=2**31)]), "events[0].submit.time_limit_s: must be from 1 to"),
        (
            scenario([submit("t", kind="session", time_limit_s=10)]),
            "events[0].submit.time_limit_s: a session has no time limit: its idle limits end it",
        ),
        (scenario(profile={"default_time_limit_s": -1}), "profiles[0].default_time_limit_s: must be from 1"),
        (
            scenario(resource={"max_time_limit_s": "x"}),
            "compute_resources[0].max_time_limit_s: must be a whole",
        ),
    ],
)
def test_time_limit_bad_input_is_refused_by_its_path(sc, message):
    with pytest.raises(ScenarioError) as e:
        parse(json.loads(json.dumps(sc)))
    assert str(e.value).startswith(message)


def test_time_limit_a_task_ends_timed_out_at_its_limit_and_is_not_requeued():
    lines = run(scenario([submit("t", time_limit_s=30), submit("u", at=1, duration_s=10)]))
    assert events(lines) == [
        (0, "t", "placed", None),
        (1, "u", "placed", None),
        (11, "u", "completed", None),
        (30, "t", "timed_out", None),
    ]
    summary = lines[-1]["summary"]
    assert summary["tasks"]["t"] == {"state": "timed_out", "preemptions": 0, "wait_s": 0}
    assert summary["ends"] == {"timed_out": 1, "dependency_failed": 0}
    assert summary["policies"]["A"]["gpu_hours"] == round(40 / 3600, 6)


def test_time_limit_counts_running_time_across_requeues_not_the_wait_between():
    """b1 borrows A's GPU; A's a1 reclaims it at 10 s. b1 waits until a1 ends at 30 s and, having
    run 10 of its 25 s, is stopped 15 s later; a checkpoint changes nothing to its limit."""
    for checkpoint in (False, True):
        sc = scenario(
            [
                submit("b0", resource="b", duration_s=100),
                submit("b1", resource="b", duration_s=100, time_limit_s=25, checkpoint=checkpoint),
                submit("a1", at=10, duration_s=20),
            ]
        )
        assert [e for e in events(run(sc)) if e[1] == "b1"] == [
            (0, "b1", "placed", None),
            (10, "b1", "preempted", "reclaim"),
            (30, "b1", "placed", None),
            (45, "b1", "timed_out", None),
        ]


def test_time_limit_a_task_reaching_its_duration_at_its_limit_completes():
    lines = run(scenario([submit("t", duration_s=30, time_limit_s=30)]))
    assert events(lines) == [(0, "t", "placed", None), (30, "t", "completed", None)]
    assert lines[-1]["summary"]["ends"] == {"timed_out": 0, "dependency_failed": 0}


def test_time_limit_on_a_cloud_pool_counts_from_the_start_on_its_node_not_the_placement():
    cloud = {
        "name": "onprem",
        "cloud": {"boot_s": 20, "idle_timeout_s": 100, "types": [{"name": "g1", "gpus": 1, "max": 2}]},
    }
    lines = run(scenario([submit("t", time_limit_s=30)], pools=[cloud]))
    assert [e for e in events(lines)] == [(0, "t", "placed", None), (50, "t", "timed_out", None)]


def test_time_limit_while_the_engine_is_disabled_work_runs_on_until_the_first_pass():
    sc = scenario(
        [submit("t", time_limit_s=30), {"at": 20, "engine": "disable"}, {"at": 42, "engine": "enable"}]
    )
    assert events(run(sc)) == [(0, "t", "placed", None), (42, "t", "timed_out", None)]


def test_time_limit_the_snapshot_carries_the_deadline_of_running_work_only():
    sim = Simulation(parse(scenario([submit("t", time_limit_s=30), submit("u"), submit("w")])), 5 * US)
    for _ in sim.run():
        pass
    placed = {t.id: t.deadline for t in sim.snapshot(5 * US).placed}
    assert placed == {"t": sim.at(30 * US), "u": None}


# -- dependencies -------------------------------------------------------------------------------


def test_dependency_after_ok_runs_once_it_succeeded_after_any_whatever_its_end():
    sc = scenario(
        [
            submit("a1", duration_s=10),
            submit("a2", duration_s=10, after_ok=["a1"]),
            submit("b1", resource="b", duration_s=10, time_limit_s=5),
            submit("b2", resource="b", duration_s=10, after_any=["b1"]),
        ]
    )
    assert events(run(sc)) == [
        (0, "a1", "placed", None),
        (0, "b1", "placed", None),
        (5, "b1", "timed_out", None),
        (6, "b2", "placed", None),
        (10, "a1", "completed", None),
        (10, "a2", "placed", None),
        (16, "b2", "completed", None),
        (20, "a2", "completed", None),
    ]


def test_dependency_failed_cancels_the_after_ok_chain_and_releases_after_any():
    sc = scenario(
        [
            submit("a1", duration_s=10),
            submit("a2", after_ok=["a1"]),
            submit("a3", after_ok=["a2"]),
            submit("a4", after_any=["a2"], duration_s=5),
            submit("a5", after_ok=["a3"], after_any=["a1"]),
            {"at": 3, "cancel": "a1"},
        ]
    )
    lines = run(sc)
    assert events(lines) == [
        (0, "a1", "placed", None),
        (3, "a1", "canceled", None),
        (3, "a2", "canceled", "dependency_failed"),
        (3, "a3", "canceled", "dependency_failed"),
        (3, "a5", "canceled", "dependency_failed"),
        (3, "a4", "placed", None),
        (8, "a4", "completed", None),
    ]
    tasks = lines[-1]["summary"]["tasks"]
    assert tasks["a3"] == {"state": "canceled", "preemptions": 0, "wait_s": 0, "reason": "dependency_failed"}
    assert lines[-1]["summary"]["ends"] == {"timed_out": 0, "dependency_failed": 3}


def test_dependency_on_a_task_submitted_later_or_already_ended():
    sc = scenario(
        [
            submit("early", duration_s=5, after_ok=["late"]),
            {"at": 10, "set_capacity": {"pool": "onprem", "capacity": 0}},
            submit("big", at=10),  # never fits (the pool shrunk to 0 for it): rejected, a failed end
            {"at": 10, "set_capacity": {"pool": "onprem", "capacity": 2}},
            submit("late", at=10, duration_s=5),
            submit("on_big", at=12, after_ok=["big"]),
            submit("any_big", at=12, duration_s=5, after_any=["big"]),
            submit("on_late", at=30, duration_s=5, after_ok=["late"]),
        ]
    )
    assert events(run(sc)) == [
        (10, "big", "rejected", "never_fits"),
        (10, "late", "placed", None),
        (12, "on_big", "canceled", "dependency_failed"),
        (12, "any_big", "placed", None),
        (15, "late", "completed", None),
        (15, "early", "placed", None),
        (17, "any_big", "completed", None),
        (20, "early", "completed", None),
        (30, "on_late", "placed", None),
        (35, "on_late", "completed", None),
    ]


def test_dependency_a_held_task_is_in_the_snapshot_with_its_verdict_and_canceled_it_fails_its_chain():
    sc = scenario(
        [
            submit("a1", duration_s=50),
            submit("a2", after_any=["a1", "b1"]),
            submit("a3", after_ok=["a2"]),
            submit("b1", at=5, resource="b", duration_s=10),
            {"at": 30, "cancel": "a2"},
        ]
    )
    sim = Simulation(parse(sc), 20 * US)
    lines = list(sim.run())
    snap = sim.snapshot(20 * US)
    assert [(h.id, h.resource, h.waits_for) for h in snap.held] == [
        ("a2", "a", ("a1",)),
        ("a3", "a", ("a2",)),
    ]
    verdict = allocate(snap).verdict("a2")
    assert (verdict.rule, verdict.position, verdict.waits_for) == ("dependency", 0, ("a1",))
    assert lines[-1]["summary"]["tasks"]["a2"] == {
        "state": "waiting",
        "preemptions": 0,
        "wait_s": 0,
        "waits_for": ["a1"],
    }
    assert [e for e in events(run(sc)) if e[0] == 30] == [
        (30, "a2", "canceled", None),
        (30, "a3", "canceled", "dependency_failed"),
    ]


def test_dependency_a_long_chain_fails_without_recursion():
    chain = [submit("t0", duration_s=10, time_limit_s=5)]
    chain += [submit(f"t{i}", after_ok=[f"t{i - 1}"]) for i in range(1, 2000)]
    lines = run(scenario(chain), until_s=6)
    assert lines[-1]["summary"]["ends"] == {"timed_out": 1, "dependency_failed": 1999}


@pytest.mark.parametrize(
    "tasks, message",
    [
        ([submit("a", after_ok=["nope"])], "events[0].submit.after_ok[0]: unknown task 'nope'"),
        ([submit("a", after_any="b")], "events[0].submit.after_any: must be a list"),
        ([submit("a", after_any=[1])], "events[0].submit.after_any[0]: must be a non-empty string"),
        ([submit("a", after_ok=["a"])], "events[0].submit.after_ok[0]: task 'a' would wait for itself"),
        (
            [submit("a"), submit("b", after_ok=["a"], after_any=["a"])],
            "events[1].submit.after_any[0]: task 'a' is listed twice",
        ),
        (
            [submit("a", after_ok=["b"]), submit("b", after_any=["a"])],
            "events[0].submit.after_ok[0]: a cycle: a -> b -> a",
        ),
        (
            [submit("c", after_ok=["a"]), submit("a", after_ok=["b"]), submit("b", at=5, after_any=["c"])],
            "events[0].submit.after_ok[0]: a cycle: c -> a -> b -> c",
        ),
        (
            [submit("x", array=2, after_ok=["x"])],
            "events[0].submit.after_ok[0]: task 'x[0]' would wait for itself",
        ),
        (
            [submit("x", array=2), submit("y", after_ok=["x", "x[1]"])],
            "events[1].submit.after_ok[1]: task 'x[1]' is listed twice",
        ),
    ],
)
def test_dependency_bad_input_is_refused_by_its_path(tasks, message):
    with pytest.raises(ScenarioError) as e:
        parse(scenario(tasks))
    assert str(e.value) == message


# -- arrays -------------------------------------------------------------------------------------


def test_array_expands_into_indexed_tasks_of_one_spec_with_at_most_max_running_placed():
    sc = scenario(
        [
            submit("x", duration_s=10, array=3, max_running=1, gpus=1),
            submit("after", duration_s=5, after_ok=["x"]),
        ],
    )
    parsed = parse(sc)
    assert [(e.what.id, e.what.array, e.what.max_running) for e in parsed.events[:3]] == [
        ("x[0]", "x", 1),
        ("x[1]", "x", 1),
        ("x[2]", "x", 1),
    ]
    assert parsed.events[3].what.after_ok == ("x[0]", "x[1]", "x[2]")
    sim = Simulation(parsed, 5 * US)
    for _ in sim.run():
        pass
    snap = sim.snapshot(5 * US)
    assert snap.arrays == {"x": 1}
    assert [(t.id, t.array) for t in snap.waiting["a"]] == [("x[1]", "x"), ("x[2]", "x")]
    assert [(v.task, v.rule, v.max_running) for v in allocate(snap).array_verdicts()] == [
        ("x[1]", "array_limit", 1),
        ("x[2]", "array_limit", 1),
    ]
    assert events(run(sc)) == [
        (0, "x[0]", "placed", None),
        (10, "x[0]", "completed", None),
        (10, "x[1]", "placed", None),
        (20, "x[1]", "completed", None),
        (20, "x[2]", "placed", None),
        (30, "x[2]", "completed", None),
        (30, "after", "placed", None),
        (35, "after", "completed", None),
    ]


def test_array_without_max_running_is_not_capped_and_a_cancel_of_it_cancels_each_task():
    sc = scenario([submit("x", array=3), {"at": 5, "cancel": "x"}])
    assert events(run(sc)) == [
        (0, "x[0]", "placed", None),
        (0, "x[1]", "placed", None),
        (5, "x[0]", "canceled", None),
        (5, "x[1]", "canceled", None),
        (5, "x[2]", "canceled", None),
    ]
    assert parse(sc).events[0].what.array == "x"


@pytest.mark.parametrize(
    "tasks, message",
    [
        ([submit("x", array=0)], "events[0].submit.array: must be a whole number of tasks from 1 to 10000"),
        (
            [submit("x", array=10001)],
            "events[0].submit.array: must be a whole number of tasks from 1 to 10000",
        ),
        ([submit("x", array=1.5)], "events[0].submit.array: must be a whole number of tasks from 1 to 10000"),
        (
            [submit("x", array=True)],
            "events[0].submit.array: must be a whole number of tasks from 1 to 10000",
        ),
        (
            [submit("x", max_running=2)],
            "events[0].submit.max_running: only an array (array: N) has a max_running",
        ),
        ([submit("x", array=2, max_running=0)], "events[0].submit.max_running: must be a whole number >= 1"),
        ([submit("x", array=2, max_running=-1)], "events[0].submit.max_running: must be a whole number >= 0"),
        (
            [submit("x[1]"), submit("x", array=2)],
            "events[1].submit.id: task 'x[1]' of array 'x' is submitted twice",
        ),
        ([submit("x", array=2), submit("x")], "events[1].submit.id: task 'x' is submitted twice"),
        ([submit("x", array=2), submit("x[0]")], "events[1].submit.id: task 'x[0]' is submitted twice"),
    ],
)
def test_array_bad_input_is_refused_by_its_path(tasks, message):
    with pytest.raises(ScenarioError) as e:
        parse(scenario(tasks))
    assert str(e.value) == message


def test_issue_35_fields_unused_leave_the_summary_and_snapshot_as_before():
    sim = Simulation(parse(scenario([submit("t")])), 5 * US)
    lines = list(sim.run())
    assert "ends" not in lines[-1]["summary"]
    snap = sim.snapshot(5 * US)
    assert snap.held == () and snap.arrays == {} and snap.placed[0].deadline is None


def test_dependency_a_task_failed_at_its_submit_fails_and_releases_its_own_dependants_held_before():
    sc = scenario(
        [
            submit("a1", duration_s=5, time_limit_s=2),
            submit("c", at=1, after_ok=["b"]),
            submit("d", at=1, duration_s=5, after_any=["b"]),
            submit("b", at=10, after_ok=["a1"]),
        ]
    )
    assert events(run(sc)) == [
        (0, "a1", "placed", None),
        (2, "a1", "timed_out", None),
        (10, "b", "canceled", "dependency_failed"),
        (10, "c", "canceled", "dependency_failed"),
        (10, "d", "placed", None),
        (15, "d", "completed", None),
    ]
