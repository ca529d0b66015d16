"""Issue 35, rule 3, in the core: a pool in maintenance (a window with start <= now < end) has
capacity 0 for the pass: its work is stopped at the pass's start, reason maintenance (requeued at
the front of its priority, not counted against max_preemptions_per_hour), and nothing is placed
there; before a window, a pool takes a task only if its time limit left ends by the window's start,
or it has none and its profile sets unlimited_before_maintenance. Verdict rule maintenance."""

from dataclasses import replace
from datetime import timedelta

import pytest
from engine_helpers import NOW, G, cr, placed, policy, pool, profile, snapshot, waiting

from apps.engine.core import Maintenance, SnapshotError, allocate, validate
from apps.engine.core.decisions import REASONS, RULES, Preemption

H = timedelta(hours=1)


def _window(start_h, end_h):
    return Maintenance(NOW + start_h * H, NOW + end_h * H)


def _estate(windows_a=(), windows_b=(), running=(), queue=(), unlimited=False, pools=("A",), cap=None):
    """Pools A and B of 4 GPUs (A first in the profile's list), group g (reservation 4, limit 8)."""
    s = snapshot(
        [
            replace(pool("A", 4, ["gpu"]), maintenance=tuple(windows_a)),
            replace(pool("B", 4, ["gpu"]), maintenance=tuple(windows_b)),
        ],
        [
            replace(
                profile("gpu", 1, list(pools), ["g"], size_from_task=True),
                unlimited_before_maintenance=unlimited,
            )
        ],
        [policy("g", 4, 8, cap=cap)],
        [cr("g/gpu", "g", "gpu")],
        {"g/gpu": tuple(queue)},
        running,
    )
    if "B" not in pools:
        s = replace(s, pools=(s.pools[0], replace(s.pools[1], profiles=())))
    validate(s)
    return s


def _task(id, seq, gpus=1, limit_s=None, priority=0):
    return replace(waiting(id, seq, gpus), limit_s=limit_s, priority=priority)


def test_maintenance_is_a_reason_and_a_rule_of_the_core():
    assert "maintenance" in REASONS and "maintenance" in RULES


def test_maintenance_preempts_placed_work_at_the_start_and_places_nothing_there():
    running = [placed("r1", "g/gpu", "A", 1, 1, ago_s=600), placed("r2", "g/gpu", "A", 2, 2, ago_s=300)]
    d = allocate(_estate([_window(0, 2)], running=running, queue=[_task("w1", 3, limit_s=60)]))
    assert d.preemptions == (
        Preemption("r1", "g/gpu", "A", "maintenance"),
        Preemption("r2", "g/gpu", "A", "maintenance"),
    )
    assert d.placements == ()
    v = d.verdict("w1")
    assert (v.rule, v.pools, v.cause, v.since, v.reset_at) == (
        "maintenance",
        ("A",),
        "in_maintenance",
        NOW,
        NOW + 2 * H,
    )


def test_maintenance_capacity_is_zero_during_the_window_and_work_goes_to_another_pool():
    d = allocate(_estate([_window(-1, 1)], pools=("A", "B"), queue=[_task(f"w{i}", i) for i in range(6)]))
    assert [(p.task, p.pool) for p in d.placements] == [(f"w{i}", "B") for i in range(4)]
    v = d.verdict("w4")
    assert (v.rule, v.pools, v.cause, v.position) == ("maintenance", ("A",), "in_maintenance", 1)
    assert d.group_verdict("g/gpu", G) == replace(v, task="", position=0)


def test_maintenance_at_its_end_the_pool_takes_work_again():
    ended = allocate(_estate([_window(-2, 0.5)], queue=[_task("w1", 1)]))
    assert ended.placements == ()
    # The loader passes only windows that have not ended: at the end, none.
    later = allocate(_estate([], queue=[_task("w1", 1)]))
    assert [(p.task, p.pool) for p in later.placements] == [("w1", "A")]


def test_maintenance_stops_do_not_count_against_the_preemption_cap():
    running = [placed("r1", "g/gpu", "A", 1, 1, ago_s=600)]
    d = allocate(_estate([_window(0, 1)], running=running, cap=0))
    assert [(p.task, p.reason) for p in d.preemptions] == [("r1", "maintenance")]


def test_maintenance_stopped_work_blocks_same_size_work_behind_it_as_the_front_of_its_queue():
    running = [placed("r1", "g/gpu", "A", 2, 9, ago_s=600)]
    queue = [_task("w1", 3, gpus=2), _task("w2", 4, gpus=1)]
    d = allocate(_estate([_window(0, 1)], pools=("A", "B"), running=running, queue=queue))
    # r1 (seq 9) goes back before w1 (seq 3): w1 (as large) waits, the smaller w2 starts on B.
    assert [(p.task, p.pool) for p in d.placements] == [("w2", "B")]
    assert (d.verdict("w1").rule, d.verdict("w1").cause) == ("maintenance", "in_maintenance")


def test_maintenance_window_ahead_a_time_limit_that_crosses_the_start_is_not_placed():
    queue = [_task("long", 1, limit_s=3601), _task("fits", 2, limit_s=3600)]
    d = allocate(_estate([_window(1, 3)], queue=queue))
    assert [(p.task, p.pool) for p in d.placements] == [("fits", "A")]
    v = d.verdict("long")
    assert (v.rule, v.pools, v.cause, v.since, v.reset_at) == (
        "maintenance",
        ("A",),
        "window_ahead",
        NOW + H,
        NOW + 3 * H,
    )


def test_maintenance_window_ahead_unlimited_work_is_placed_only_if_the_profile_allows_it():
    queue = [_task("free", 1)]
    assert allocate(_estate([_window(1, 3)], queue=queue)).placements == ()
    d = allocate(_estate([_window(1, 3)], queue=queue, unlimited=True))
    assert [(p.task, p.pool) for p in d.placements] == [("free", "A")]


def test_maintenance_a_task_refused_on_pool_a_goes_to_pool_b():
    queue = [_task("long", 1, limit_s=7200), _task("short", 2, limit_s=60)]
    d = allocate(_estate([_window(1, 3)], pools=("A", "B"), queue=queue))
    assert [(p.task, p.pool) for p in d.placements] == [("short", "A"), ("long", "B")]


def test_maintenance_window_ahead_verdicts_are_per_task_and_given_by_maintenance_verdicts():
    queue = [_task("a", 1, limit_s=60), _task("b", 2, limit_s=7200), _task("c", 3), _task("d", 4, limit_s=10)]
    running = [placed(f"r{i}", "g/gpu", "A", 1, i, ago_s=60) for i in range(3)]
    d = allocate(_estate([_window(1, 3)], running=running, queue=queue))
    assert [p.task for p in d.placements] == ["a"]
    rules = {v.task: (v.rule, v.cause, v.position) for v in d.verdicts()}
    assert rules == {
        "b": ("maintenance", "window_ahead", 1),
        "c": ("maintenance", "window_ahead", 2),
        "d": ("behind_higher_priority", None, 3),  # a took the room A had: d's limit fits
    }
    assert [v.task for v in d.maintenance_verdicts()] == ["b", "c"]
    assert d.group_verdict("g/gpu", G).rule == "behind_higher_priority"


def test_maintenance_verdicts_cost_nothing_without_a_window_ahead():
    d = allocate(_estate([_window(0, 1)], queue=[_task("a", 1)]))
    assert d.maintenance_verdicts() == ()
    assert allocate(_estate(queue=[_task("a", 1)])).maintenance_verdicts() == ()


def test_maintenance_reclaim_does_not_preempt_for_a_task_that_may_not_go_there():
    """Group g (reservation 4) waits below its reservation; borrower o runs on A. The task's limit
    crosses A's window: reclaim must not stop o's work for it."""
    s = snapshot(
        [replace(pool("A", 2, ["gpu"]), maintenance=(_window(1, 2),))],
        [profile("gpu", 1, ["A"], ["g", "o"], size_from_task=True)],
        [policy("g", 2, 2), policy("o", 0, 2)],
        [cr("g/gpu", "g", "gpu"), cr("o/gpu", "o", "gpu")],
        {"g/gpu": (_task("long", 1, limit_s=7200),)},
        [placed("o1", "o/gpu", "A", 2, 0, ago_s=60)],
    )
    d = allocate(s)
    assert d.preemptions == () and d.placements == ()
    assert d.verdict("long").cause == "window_ahead"
    short = allocate(replace(s, waiting={"g/gpu": (_task("short", 1, limit_s=600),)}))
    assert [p.reason for p in short.preemptions] == ["reclaim"]
    assert [p.task for p in short.placements] == ["short"]


def test_maintenance_never_fits_reads_the_declared_capacity():
    d = allocate(_estate([_window(0, 1)], queue=[_task("big", 1, gpus=4)]))
    assert d.verdict("big").rule == "maintenance"
    d = allocate(_estate([_window(0, 1)], queue=[_task("huge", 1, gpus=5)]))
    assert (d.verdict("huge").rule, d.verdict("huge").cause) == ("never_fits", "capacity")


@pytest.mark.parametrize(
    "windows, message",
    [
        ([Maintenance(NOW + H, NOW + H)], "must end after its start"),
        ([Maintenance(NOW - 2 * H, NOW)], "has ended"),
        ([_window(1, 3), _window(2, 4)], "overlap or not in order"),
        ([_window(3, 4), _window(1, 2)], "overlap or not in order"),
    ],
)
def test_maintenance_validate_refuses_bad_windows(windows, message):
    with pytest.raises(SnapshotError, match=message):
        _estate(windows)


def test_maintenance_validate_refuses_a_negative_limit_left():
    with pytest.raises(SnapshotError, match="limit_s must be >= 0"):
        _estate(queue=[_task("a", 1, limit_s=-1)])


def test_maintenance_windows_that_touch_are_valid():
    validate(_estate([_window(1, 2), _window(2, 3)]))


def test_maintenance_verdict_names_the_first_pool_of_the_list_in_maintenance_or_refusing_the_task():
    queue = [_task("long", 1, limit_s=7200), _task("short", 2, limit_s=60, gpus=5)]
    d = allocate(_estate([_window(1, 3)], [_window(-1, 1)], pools=("A", "B"), queue=queue))
    long, group = d.verdict("long"), d.group_verdict("g/gpu", G)
    assert (long.rule, long.pools, long.cause) == ("maintenance", ("A",), "window_ahead")
    assert (group.rule, group.pools, group.cause) == ("maintenance", ("B",), "in_maintenance")
    assert d.verdict("short").rule == "never_fits"
