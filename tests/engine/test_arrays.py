"""Issue 35, rule 5, in the core: `Snapshot.arrays` caps how many tasks of an array are placed at
once (`max_running`, counting the placements the pass makes). A waiting task of a capped array at
its cap is passed over, so it blocks nothing behind it, and its verdict is array_limit unless a
rule before it (never_fits up to budget_start_check) holds it."""

from dataclasses import replace
from datetime import timedelta

import pytest
from engine_helpers import NOW, cr, placed, policy, pool, profile, snapshot, waiting

from apps.engine.core import SnapshotError, allocate, validate
from apps.engine.core.decisions import RULES


def _in(array, task):
    return replace(task, array=array)


def _estate(queue, running=(), arrays=None, capacity=8, limit=8, sft=True, starvation_s=None):
    s = replace(
        snapshot(
            [pool("onprem", capacity, ["gpu"])],
            [replace(profile("gpu", 1, ["onprem"], ["A"], size_from_task=sft), starvation_s=starvation_s)],
            [policy("A", 2, limit)],
            [cr("a", "A", "gpu")],
            {"a": tuple(queue)},
            running,
        ),
        arrays={"x": 2} if arrays is None else arrays,
    )
    validate(s)
    return s


def test_array_limit_is_a_rule_of_the_core():
    assert "array_limit" in RULES


@pytest.mark.parametrize("sft", [True, False])
def test_array_limit_never_more_than_max_running_placed_and_later_work_passes_the_held_ones(sft):
    queue = [_in("x", waiting(f"x{i}", i, 1)) for i in range(1, 5)] + [waiting("late", 9, 1)]
    running = [_in("x", placed("x0", "a", "onprem", 1, 0, ago_s=30))]
    d = allocate(_estate(queue, running, sft=sft))
    assert [p.task for p in d.placements] == ["x1", "late"]
    verdicts = [(v.task, v.position, v.rule, v.cause, v.max_running) for v in d.verdicts()]
    assert verdicts == [
        ("x2", 1, "array_limit", "x", 2),
        ("x3", 2, "array_limit", "x", 2),
        ("x4", 3, *verdicts[0][2:]),
    ]
    assert [v.task for v in d.array_verdicts()] == ["x2", "x3", "x4"]
    assert d.group_verdict("a", 1000).rule != "array_limit"


def test_array_limit_a_held_array_task_does_not_block_smaller_work_behind_it():
    queue = [_in("x", waiting("x1", 1, 2)), _in("x", waiting("x2", 2, 2)), waiting("small", 3, 1)]
    running = [_in("x", placed(f"r{i}", "a", "onprem", 2, i, ago_s=30)) for i in (0, 1)]
    d = allocate(_estate(queue, running))
    assert [p.task for p in d.placements] == ["small"]
    assert [(v.task, v.rule) for v in d.verdicts()] == [("x1", "array_limit"), ("x2", "array_limit")]


def test_array_limit_an_earlier_rule_holds_it_first():
    """A at its limit: the policy's limit is the reason, not the array's cap."""
    queue = [_in("x", waiting("x2", 2, 1))]
    running = [_in("x", placed(f"x{i}", "a", "onprem", 1, i, ago_s=30)) for i in (0, 1)]
    d = allocate(_estate(queue, running, limit=2))
    assert d.verdict("x2").rule == "policy_limit"
    assert d.array_verdicts() == ()


def test_array_limit_a_task_stopping_or_stopped_at_its_time_limit_frees_its_place_in_the_same_pass():
    queue = [_in("x", waiting("x3", 3, 1)), _in("x", waiting("x4", 4, 1))]
    running = [  # x0 stopping counts for nothing (2 GPUs: it blocks no 1-GPU work behind it)
        _in("x", placed("x0", "a", "onprem", 2, 0, ago_s=30, preempting=True)),
        replace(_in("x", placed("x1", "a", "onprem", 1, 1, ago_s=30)), deadline=NOW - timedelta(seconds=1)),
        _in("x", placed("x2", "a", "onprem", 1, 2, ago_s=30)),
    ]
    d = allocate(_estate(queue, running))
    assert [(p.task, p.reason) for p in d.preemptions] == [("x1", "time_limit")]
    assert [p.task for p in d.placements] == ["x3"]
    assert d.verdict("x4").rule == "array_limit"


def test_array_limit_only_for_the_arrays_the_snapshot_caps():
    queue = [_in("y", waiting(f"y{i}", i, 1)) for i in range(1, 4)]
    running = [_in("y", placed("y0", "a", "onprem", 1, 0, ago_s=30))]
    d = allocate(_estate(queue, running))
    assert [p.task for p in d.placements] == ["y1", "y2", "y3"]


def test_array_limit_a_cap_below_what_runs_stops_nothing_and_starts_nothing():
    running = [_in("x", placed(f"x{i}", "a", "onprem", 1, i, ago_s=30)) for i in range(3)]
    d = allocate(_estate([_in("x", waiting("x3", 3, 1))], running, arrays={"x": 1}))
    assert d.preemptions == () and d.placements == ()
    assert d.verdict("x3").max_running == 1
    d = allocate(_estate([_in("x", waiting("x0", 0, 1))], arrays={"x": 0}))
    assert d.placements == () and d.verdict("x0").rule == "array_limit"


def test_array_limit_the_starvation_guard_skips_a_head_its_array_holds():
    """The head x1 cannot start (its array is at its cap): the 4-GPU task behind it, waiting for
    an hour, is the head that holds the pool against new 1-GPU work."""
    since = NOW - timedelta(hours=1)
    queue = [
        replace(_in("x", waiting("x1", 1, 1)), since=since),
        replace(waiting("big", 2, 4), since=since),
        replace(waiting("small", 3, 1), since=NOW),
    ]
    running = [_in("x", placed(f"x{i}", "a", "onprem", 1, 10 + i, ago_s=30)) for i in (0, 2)]
    running += [placed("r", "a", "onprem", 4, 20, ago_s=30)]
    d = allocate(_estate(queue, running, limit=16, starvation_s=600))
    assert d.placements == ()
    assert [(v.task, v.rule) for v in d.verdicts()] == [
        ("x1", "array_limit"),
        ("big", "starving"),
        ("small", "starvation_hold"),
    ]


def test_array_limit_validate_refuses_a_negative_cap():
    with pytest.raises(SnapshotError, match="array x: max_running must be >= 0"):
        _estate([], arrays={"x": -1})


def test_array_limit_a_task_reclaimed_in_the_pass_keeps_its_place_in_the_count_until_the_next():
    """B borrows; A's a1 (2 GPUs, inside its reservation) reclaims B's newest work, x0 of array x
    (cap 1). x1, behind it and smaller (so not blocked by it), waits for the next pass: the count
    only falls before the pass places anything, so no task passed over could have started."""
    s = replace(
        snapshot(
            [pool("onprem", 4, ["gpu"])],
            [profile("gpu", 1, ["onprem"], ["A", "B"], size_from_task=True)],
            [policy("A", 2, 2), policy("B", 0, 4)],
            [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
            {"a": (waiting("a1", 10, 2),), "b": (_in("x", waiting("x1", 5, 1)),)},
            [
                placed("r", "b", "onprem", 1, 1, ago_s=60),
                _in("x", placed("x0", "b", "onprem", 2, 2, ago_s=30)),
            ],
        ),
        arrays={"x": 1},
    )
    d = allocate(s)
    assert [(p.task, p.reason) for p in d.preemptions] == [("x0", "reclaim")]
    assert [p.task for p in d.placements] == ["a1"]
    assert d.verdict("x1").rule == "array_limit"
