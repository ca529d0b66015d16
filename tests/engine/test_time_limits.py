"""Issue 35, rule 1, in the core: a placed task whose `deadline` is reached is stopped first in the
pass (before the budget stops), reason time_limit, for good: its GPUs are free in that pass and it
does not go back to its queue, so it blocks nothing behind it there."""

from dataclasses import replace
from datetime import timedelta

from engine_helpers import NOW, cr, placed, policy, pool, profile, snapshot, waiting

from apps.engine.core import allocate, validate
from apps.engine.core.decisions import REASONS, Preemption


def _estate(running, queue=(), budget_h=None, used_h=0):
    """One 2-GPU pool, profile `gpu` (sizes from tasks), group A (reservation 2, limit 2)."""
    s = snapshot(
        [pool("onprem", 2, ["gpu"])],
        [profile("gpu", 1, ["onprem"], ["A"], size_from_task=True)],
        [policy("A", 2, 2, budget_h=budget_h, used_h=used_h)],
        [cr("a", "A", "gpu")],
        {"a": tuple(queue)},
        running,
    )
    validate(s)
    return s


def _limited(task, seconds_from_now):
    return replace(task, deadline=NOW + timedelta(seconds=seconds_from_now))


def test_time_limit_is_a_reason_of_the_core():
    assert "time_limit" in REASONS


def test_time_limit_stops_work_at_its_deadline_and_frees_its_gpus_in_the_same_pass():
    a1 = _limited(placed("a1", "a", "onprem", 1, 1, ago_s=3600), 0)  # reached exactly now
    a2 = _limited(placed("a2", "a", "onprem", 1, 2, ago_s=60), 1)  # one second left
    d = allocate(_estate([a1, a2], [waiting("a3", 3, 1)]))
    assert d.preemptions == (Preemption("a1", "a", "onprem", "time_limit"),)
    assert [(p.task, p.pool, p.phase) for p in d.placements] == [("a3", "onprem", "fill")]


def test_time_limit_without_a_deadline_work_runs_on():
    d = allocate(_estate([placed("a1", "a", "onprem", 2, 1, ago_s=10**6)], [waiting("a2", 2, 1)]))
    assert d.preemptions == () and d.placements == ()
    ahead = _limited(placed("a1", "a", "onprem", 2, 1, ago_s=10**6), 0.001)
    assert allocate(_estate([ahead], [waiting("a2", 2, 1)])).preemptions == ()


def test_time_limit_stops_come_first_then_the_budget_stops_of_the_rest():
    a1 = _limited(placed("a1", "a", "onprem", 1, 1, ago_s=600), -30)
    a2 = placed("a2", "a", "onprem", 1, 2, ago_s=60)
    d = allocate(_estate([a1, a2], budget_h=1, used_h=1))
    assert [(p.task, p.reason) for p in d.preemptions] == [("a1", "time_limit"), ("a2", "budget")]


def test_time_limit_stops_several_in_placement_order():
    running = [_limited(placed(f"a{i}", "a", "onprem", 1, i, ago_s=100 - i), -i) for i in (1, 2)]
    d = allocate(_estate(running))
    assert [(p.task, p.reason, p.for_task) for p in d.preemptions] == [
        ("a1", "time_limit", None),
        ("a2", "time_limit", None),
    ]


def test_time_limit_stopped_work_does_not_go_back_so_same_size_work_behind_it_starts():
    """A reclaimed or budget-stopped task returns to the front of its queue and blocks work of its
    size behind it until it has stopped; a task stopped at its time limit ends."""
    a1 = _limited(placed("a1", "a", "onprem", 2, 1, ago_s=600), 0)
    d = allocate(_estate([a1], [waiting("a2", 2, 2)]))
    assert [p.task for p in d.preemptions] == ["a1"]
    assert [p.task for p in d.placements] == ["a2"]


def test_time_limit_work_already_stopping_is_not_stopped_again_nor_blocks_its_queue():
    stopping = placed("a1", "a", "onprem", 2, 1, ago_s=600, preempting=True)
    d = allocate(_estate([_limited(stopping, -5)], [waiting("a2", 2, 2)]))
    assert d.preemptions == ()
    assert [p.task for p in d.placements] == ["a2"]
    # Stopping for another reason (its deadline ahead), it comes back first: a2 waits behind it.
    d = allocate(_estate([_limited(stopping, 50)], [waiting("a2", 2, 2)]))
    assert d.placements == () and d.verdict("a2").rule == "behind_higher_priority"


def test_time_limit_stopped_work_is_no_reclaim_victim_and_reclaim_takes_what_is_still_needed():
    """B borrows the whole 4-GPU pool; A (reservation 2) queues 2 GPUs of work. B's b1, at its
    limit, stops for it, so reclaim needs to take only one more task of B's (the newest)."""
    s = snapshot(
        [pool("onprem", 4, ["gpu"])],
        [profile("gpu", 1, ["onprem"], ["A", "B"], size_from_task=True)],
        [policy("A", 2, 4), policy("B", 0, 4)],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {"a": (waiting("a1", 10, 1), waiting("a2", 11, 1))},
        [
            _limited(placed("b1", "b", "onprem", 1, 1, ago_s=40), 0),
            *(placed(f"b{i}", "b", "onprem", 1, i, ago_s=40 - i) for i in (2, 3, 4)),
        ],
    )
    d = allocate(s)
    assert [(p.task, p.reason) for p in d.preemptions] == [("b1", "time_limit"), ("b4", "reclaim")]
    assert [(p.task, p.phase) for p in d.placements] == [("a1", "fill"), ("a2", "reclaim")]
