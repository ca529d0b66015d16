"""Unit tests of one pass: each rule on a hand-made snapshot."""

from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from engine_helpers import NOW, cr, placed, policy, pool, profile, snapshot, two_groups, waiting, window

from apps.engine.core import SnapshotError, allocate, validate


def placed_ids(d):
    return [p.task for p in d.placements]


def preempted_ids(d):
    return [p.task for p in d.preemptions]


# -- fill, reclaim, lend --------------------------------------------------------------------


def test_reservation_eligible_work_reclaims_borrowed_gpus_and_is_placed_in_the_same_pass():
    d = allocate(two_groups(b_running=4, a_waiting=2))
    assert [(p.task, p.reason, p.for_task) for p in d.preemptions] == [
        ("b3", "reclaim", "a0"),
        ("b2", "reclaim", "a1"),
    ]
    assert [(p.task, p.phase) for p in d.placements] == [("a0", "reclaim"), ("a1", "reclaim")]


def test_no_pointless_preemption_when_reclaim_cannot_free_enough():
    # A needs 2 GPUs for one task; B borrows only 1 above its reservation.
    d = allocate(two_groups(res=(2, 3), b_running=4, a_waiting=1, a_size=2))
    assert d.preemptions == () and d.placements == ()
    assert d.verdict("a0").rule == "no_capacity"


def test_reclaim_victims_come_from_the_policy_furthest_above_its_reservation_recomputed():
    s = snapshot(
        [pool("p", 6, ["gpu"])],
        [profile("gpu", 1, ["p"], ["A", "B", "C"])],
        [policy("A", 2, 6), policy("B", 0, 6), policy("C", 0, 6)],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu"), cr("c", "C", "gpu")],
        {"a": (waiting("a0", 100, 1), waiting("a1", 101, 1))},
        [
            placed("b0", "b", "p", 1, 1, 50),
            placed("b1", "b", "p", 1, 2, 40),
            placed("b2", "b", "p", 1, 3, 30),
            placed("c0", "c", "p", 1, 4, 20),
            placed("c1", "c", "p", 1, 5, 10),
            placed("c2", "c", "p", 1, 6, 5),
        ],
    )
    # B and C are both 3 above: B first (listed first), then C (now further above), newest first.
    assert preempted_ids(allocate(s)) == ["b2", "c2"]


def test_reclaim_takes_only_the_victims_it_needs():
    # Least lost work first takes the 1-GPU task (10 GPU-s lost) and then the 2-GPU one (40: it
    # checkpointed 20 s ago); the 1-GPU one is handed back.
    s = snapshot(
        [pool("p", 4, ["gpu"])],
        [profile("gpu", 1, ["p"], ["A", "B"], size_from_task=True)],
        [policy("A", 2, 4), policy("B", 0, 4)],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {"a": (waiting("a0", 100, 2),)},
        [
            placed("b-old", "b", "p", 1, 1, 60),
            replace(placed("b-two", "b", "p", 2, 2, 50), saved_at=NOW - timedelta(seconds=20)),
            placed("b-new", "b", "p", 1, 3, 10),
        ],
    )
    d = allocate(s)
    assert preempted_ids(d) == ["b-two"] and placed_ids(d) == ["a0"]


def test_reclaim_tries_the_pools_in_the_task_pool_order():
    s = snapshot(
        [pool("p1", 2, ["gpu"]), pool("p2", 2, ["gpu"])],
        [profile("gpu", 1, ["p1", "p2"], ["A", "B"])],
        [policy("A", 1, 4), policy("B", 0, 4)],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {"a": (waiting("a0", 100, 1),)},
        [
            placed("b0", "b", "p1", 1, 1, 40),
            placed("b1", "b", "p1", 1, 2, 30),
            placed("b2", "b", "p2", 1, 3, 20),
            placed("b3", "b", "p2", 1, 4, 10),
        ],
    )
    d = allocate(s)
    assert [(p.task, p.pool) for p in d.preemptions] == [("b1", "p1")]
    assert [(p.task, p.pool) for p in d.placements] == [("a0", "p1")]


def test_reclaim_never_takes_an_ancestor_below_its_reservation():
    # B borrows inside dept, but dept as a whole is at its reservation: A (outside) cannot take it.
    s = snapshot(
        [pool("p", 4, ["gpu"])],
        [profile("gpu", 1, ["p"], ["A", "B"])],
        [policy("A", 1, 4), policy("dept", 4, 4), policy("B", 0, 4, parent="dept")],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {"a": (waiting("a0", 100, 1),)},
        [placed(f"b{i}", "b", "p", 1, i, 50 - i) for i in range(4)],
    )
    d = allocate(s)
    assert d.preemptions == () and d.verdict("a0").rule == "no_capacity"


def test_lend_respects_the_limit_of_the_policy_and_of_every_ancestor():
    s = snapshot(
        [pool("p", 8, ["gpu"])],
        [profile("gpu", 1, ["p"], ["X", "Y"])],
        [policy("dept", 0, 3), policy("X", 0, 2, parent="dept"), policy("Y", 0, 4, parent="dept")],
        [cr("x", "X", "gpu"), cr("y", "Y", "gpu")],
        {
            "x": tuple(waiting(f"x{i}", i, 1) for i in range(3)),
            "y": (waiting("y0", 10, 1), waiting("y1", 11, 1)),
        },
    )
    d = allocate(s)
    assert placed_ids(d) == ["x0", "x1", "y0"]
    assert (d.verdict("x2").rule, d.verdict("x2").policy) == ("policy_limit", "X")
    assert (d.verdict("y1").rule, d.verdict("y1").policy) == ("ancestor_limit", "dept")


def test_first_pool_first_round_by_round_so_first_choices_fill_before_spills():
    # X lists [p1, p2], Y lists [p2]: Y's first choice p2 is served before X spills onto it.
    s = snapshot(
        [pool("p1", 1, ["X"]), pool("p2", 1, ["X", "Y"])],
        [profile("X", 1, ["p1", "p2"], ["A"]), profile("Y", 1, ["p2"], ["A"])],
        [policy("A", 0, 4)],
        [cr("ax", "A", "X"), cr("ay", "A", "Y")],
        {"ax": (waiting("x0", 1, 1), waiting("x1", 2, 1)), "ay": (waiting("y0", 3, 1),)},
    )
    d = allocate(s)
    assert [(p.task, p.pool) for p in d.placements] == [("x0", "p1"), ("y0", "p2")]


def test_execution_priority_orders_profiles_on_a_pool_and_queuing_priority_orders_policies():
    s = snapshot(
        [pool("p", 2, ["small", "big"])],
        [profile("big", 2, ["p"], ["A"]), profile("small", 1, ["p"], ["B", "A"])],
        [policy("A", 0, 4), policy("B", 0, 4)],
        [cr("a-big", "A", "big"), cr("a-small", "A", "small"), cr("b-small", "B", "small")],
        {
            "a-big": (waiting("big", 1, 2),),
            "a-small": (waiting("as", 2, 1),),
            "b-small": (waiting("bs", 3, 1),),
        },
    )
    d = allocate(s)
    assert placed_ids(d) == ["bs", "as"]
    assert d.verdict("big").rule == "behind_higher_priority"


def test_a_task_that_does_not_fit_does_not_block_smaller_tasks_behind_it():
    s = replace(
        two_groups(capacity=3, res=(3, 0)),
        waiting={
            "a": (
                waiting("four", 1, 4),
                waiting("one", 2, 1),
                waiting("two", 3, 2),
                waiting("one-more", 4, 1),
            )
        },
    )
    d = allocate(s)
    assert placed_ids(d) == ["one", "two"]
    assert (d.verdict("four").rule, d.verdict("four").position) == ("never_fits", 1)
    assert (d.verdict("one-more").rule, d.verdict("one-more").position) == ("behind_higher_priority", 2)


def test_fractions_add_up_exactly_in_milli_gpus():
    s = snapshot(
        [pool("p", 1, ["tenth"])],
        [profile("tenth", 0.1, ["p"], ["A"])],
        [policy("A", 1, 1)],
        [cr("a", "A", "tenth")],
        {"a": tuple(waiting(f"t{i}", i, 0.1) for i in range(11))},
    )
    d = allocate(s)
    assert placed_ids(d) == [f"t{i}" for i in range(10)]
    assert d.verdict("t10").rule == "policy_limit"


def test_disabled_pool_gets_no_work():
    s = snapshot(
        [pool("p1", 4, ["gpu"], enabled=False), pool("p2", 1, ["gpu"])],
        [profile("gpu", 1, ["p1", "p2"], ["A"])],
        [policy("A", 4, 4)],
        [cr("a", "A", "gpu")],
        {"a": (waiting("a0", 1, 1), waiting("a1", 2, 1))},
    )
    d = allocate(s)
    assert [(p.task, p.pool) for p in d.placements] == [("a0", "p2")]
    assert (d.verdict("a1").rule, d.verdict("a1").pools) == ("behind_higher_priority", ("p2",))


# -- preempting work ----------------------------------------------------------------------


def test_preempting_work_counts_for_nothing_in_pool_room_and_usage():
    s = two_groups(capacity=2, res=(1, 1), lim=(2, 2), a_waiting=2)
    s = replace(
        s,
        placed=(
            placed("stop1", "b", "onprem", 1, 1, 9, preempting=True),
            placed("stop2", "b", "onprem", 1, 2, 8, preempting=True),
        ),
    )
    assert placed_ids(allocate(s)) == ["a0", "a1"]


def test_stopping_work_blocks_same_or_larger_work_behind_it_in_its_queue_but_not_smaller():
    s = two_groups(capacity=4, res=(0, 0), lim=(4, 4))
    s = replace(
        s,
        waiting={"a": (waiting("big", 20, 2), waiting("small", 21, 0.5))},
        placed=(placed("stopping", "a", "onprem", 1, 10, 5, preempting=True),),
    )
    d = allocate(s)
    assert placed_ids(d) == ["small"]
    assert (d.verdict("big").rule, d.verdict("big").pools) == ("behind_higher_priority", ("onprem",))


# -- budgets ------------------------------------------------------------------------------


def budget_estate(budget_h, used_h, running, queue, weight=1, low_watermark_s=900, parent_budget=None):
    policies = [policy("A", 8, 8, parent="org", budget_h=budget_h, used_h=used_h)]
    org = (
        policy("org", 0, 8)
        if parent_budget is None
        else policy("org", 0, 8, budget_h=parent_budget[0], used_h=parent_budget[1])
    )
    return snapshot(
        [pool("p", 8, ["gpu", "cpu"])],
        [profile("gpu", 1, ["p"], ["A"], weight=weight), profile("cpu", 0, ["p"], ["A"], weight=0)],
        policies + [org],
        [cr("a", "A", "gpu"), cr("a-cpu", "A", "cpu")],
        {"a": tuple(waiting(t, i + 100, 1) for i, t in enumerate(queue))},
        [placed(t, "a", "p", 1, i, ago_s=100 - i) for i, t in enumerate(running)],
        low_watermark_s,
    )


def test_start_check_needs_the_budget_to_last_the_low_watermark_at_the_combined_rate():
    # 0.5 h left, 2 running at weight 1: a third needs 0.25 h x 3 = 0.75 h.
    d = allocate(budget_estate(1, 0.5, ["r0", "r1"], ["w0"]))
    v = d.verdict("w0")
    assert (v.rule, v.policy, v.hours_left, v.hours_needed) == ("budget_start_check", "A", 0.5, 0.75)
    d = allocate(budget_estate(1, 0.3, ["r0"], ["w0", "w1"]))
    assert placed_ids(d) == ["w0"] and d.verdict("w1").rule == "budget_start_check"


def test_one_task_may_start_when_none_of_the_budgeted_work_runs():
    d = allocate(budget_estate(1, 0.99, [], ["w0", "w1"]))
    assert placed_ids(d) == ["w0"]
    assert d.verdict("w1").rule == "budget_start_check"


def test_time_weight_scales_the_start_check():
    # weight 2: 1 h left, 1 running: a second needs 0.25 h x (2 + 2) = 1 h, exactly enough.
    d = allocate(budget_estate(2, 1, ["r0"], ["w0", "w1"], weight=2))
    assert placed_ids(d) == ["w0"]
    assert d.verdict("w1").hours_needed == 1.5


def test_used_up_budget_preempts_running_weighted_work_newest_first_and_holds_new_work():
    d = allocate(budget_estate(1, 1, ["r0", "r1", "r2"], ["w0"]))
    assert [(p.task, p.reason) for p in d.preemptions] == [
        ("r2", "budget"),
        ("r1", "budget"),
        ("r0", "budget"),
    ]
    v = d.verdict("w0")
    assert (v.rule, v.policy, v.reset_at) == ("budget_used_up", "A", datetime(2025, 1, 9, tzinfo=UTC))


def test_used_up_ancestor_budget_stops_its_whole_subtree_but_not_weight_zero_work():
    s = budget_estate(None, 0, ["r0"], ["w0"], parent_budget=(2, 2.5))
    s = replace(
        s,
        placed=s.placed + (placed("cpu0", "a-cpu", "p", 0, 50, 0),),
        waiting={**s.waiting, "a-cpu": (waiting("cpu1", 60, 0),)},
    )
    d = allocate(s)
    assert preempted_ids(d) == ["r0"] and placed_ids(d) == ["cpu1"]
    assert (d.verdict("w0").rule, d.verdict("w0").policy) == ("budget_used_up", "org")


def test_the_start_check_applies_to_an_ancestor_budget_at_the_subtree_rate():
    # A has no budget; org has 0.5 h left with 2 of A's tasks running: a third needs 0.75 h.
    d = allocate(budget_estate(None, 0, ["r0", "r1"], ["w0"], parent_budget=(2, 1.5)))
    v = d.verdict("w0")
    assert placed_ids(d) == [] and preempted_ids(d) == []
    assert (v.rule, v.policy, v.hours_left, v.hours_needed) == ("budget_start_check", "org", 0.5, 0.75)
    # 0.75 h left is exactly enough for the third.
    d = allocate(budget_estate(None, 0, ["r0", "r1"], ["w0", "w1"], parent_budget=(2, 1.25)))
    assert placed_ids(d) == ["w0"] and d.verdict("w1").policy == "org"


def test_weekly_and_monthly_reset_times_follow_the_utc_calendar():
    for period, reset in (
        ("week", datetime(2025, 1, 13, tzinfo=UTC)),
        ("month", datetime(2025, 2, 1, tzinfo=UTC)),
    ):
        s = budget_estate(1, 1, [], ["w0"])
        s = replace(
            s,
            policies=(
                replace(s.policies[0], budgets=(replace(s.policies[0].budgets[0], period=period),)),
                s.policies[1],
            ),
        )
        assert allocate(s).verdict("w0").reset_at == reset


# -- verdicts -------------------------------------------------------------------------------


def test_verdict_positions_count_only_tasks_still_waiting_in_the_compute_resource():
    s = two_groups(capacity=4, res=(2, 0), lim=(2, 4), a_waiting=5)
    d = allocate(s)
    assert placed_ids(d) == ["a0", "a1"]
    assert [(v.task, v.position, v.rule) for v in d.verdicts()] == [
        ("a2", 1, "policy_limit"),
        ("a3", 2, "policy_limit"),
        ("a4", 3, "policy_limit"),
    ]
    assert d.verdict("a0") is None and d.verdict("nope") is None
    assert [d.verdict(v.task) for v in d.verdicts()] == list(d.verdicts())


def test_behind_higher_priority_when_room_was_taken_this_pass():
    d = allocate(two_groups(capacity=2, res=(0, 0), a_waiting=2, b_waiting=1))
    assert placed_ids(d) == ["a0", "a1"]
    v = d.verdict("bw0")
    assert (v.rule, v.pools) == ("behind_higher_priority", ("onprem",))


def test_no_capacity_names_the_profile_pools():
    d = allocate(two_groups(capacity=1, b_running=1, a_waiting=1))
    assert (d.verdict("a0").rule, d.verdict("a0").pools) == ("no_capacity", ("onprem",))


def test_never_fits_names_the_largest_enabled_pool_or_says_none_is_enabled():
    d = allocate(two_groups(capacity=2, a_waiting=1, a_size=3))
    v = d.verdict("a0")
    assert (v.rule, v.cause, v.pools) == ("never_fits", "capacity", ("onprem",))
    s = two_groups(capacity=8, a_waiting=1)
    s = replace(s, pools=(replace(s.pools[0], enabled=False),))
    v = allocate(s).verdict("a0")
    assert (v.rule, v.cause, v.pools) == ("never_fits", "no_pool", ("onprem",))


# -- scale ----------------------------------------------------------------------------------


class CountingQueue(Sequence):
    """A queue that counts how many of its tasks a pass reads."""

    def __init__(self, tasks):
        self.tasks = tuple(tasks)
        self.reads = 0

    def __len__(self):
        return len(self.tasks)

    def __getitem__(self, i):
        self.reads += 1
        return self.tasks[i]

    def __iter__(self):
        self.reads += len(self.tasks)
        return iter(self.tasks)


def deep(n, gpus=1, start=0):
    return CountingQueue(waiting(f"t{i}", start + i, gpus) for i in range(n))


def test_a_full_pool_reads_no_task_of_a_deep_queue():
    s = two_groups(capacity=4, res=(0, 0), lim=(4, 4), b_running=4)
    q = deep(100_000)
    s = replace(s, waiting={"a": q})
    d = allocate(s)
    assert d.placements == () and q.reads == 0


def test_a_policy_at_its_limit_reads_no_task_of_a_deep_queue():
    s = two_groups(capacity=8, res=(0, 0), lim=(4, 4), b_running=0)
    s = replace(
        s, waiting={"b": deep(100_000)}, placed=tuple(placed(f"b{i}", "b", "onprem", 1, i) for i in range(4))
    )
    d = allocate(s)
    # Only its head is read: the priority phase compares it with the policy's running work.
    assert d.placements == () and s.waiting["b"].reads <= 1


def test_a_pass_reads_only_the_heads_it_places_from_a_deep_queue():
    s = two_groups(capacity=3, res=(0, 0), lim=(4, 4))
    s = replace(s, waiting={"a": deep(100_000)})
    d = allocate(s)
    assert len(d.placements) == 3 and s.waiting["a"].reads <= 10


def test_sizes_from_tasks_are_read_lazily_only_until_a_fitting_size_is_found():
    s = two_groups(capacity=1, res=(0, 0), lim=(4, 4))
    tasks = [waiting("big", 0, 4)] + [waiting(f"t{i}", i + 1, 1) for i in range(100_000)]
    s = replace(s, waiting={"a": CountingQueue(tasks)})
    d = allocate(s)
    assert placed_ids(d) == ["t0"] and s.waiting["a"].reads <= 10


# -- determinism and validation -------------------------------------------------------------


def test_same_snapshot_same_decisions_and_verdicts():
    s = two_groups(b_running=4, a_waiting=3, b_waiting=2)
    a, b = allocate(s), allocate(s)
    assert a == b and list(a.verdicts()) == list(b.verdicts())


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: replace(s, now=datetime(2025, 1, 1)), "now must be aware UTC"),
        (lambda s: replace(s, policies=(policy("A", 3, 2), s.policies[1])), "reservation <= limit"),
        (lambda s: replace(s, waiting={"a": (waiting("x", 5, 1), waiting("y", 4, 1))}), "queue order"),
        (lambda s: replace(s, waiting={"zz": ()}), "unknown compute resource"),
        (
            lambda s: replace(
                s, placed=(placed("p1", "b", "onprem", 1, 2, 0), placed("p2", "b", "onprem", 1, 1, 10))
            ),
            "placement order",
        ),
        (lambda s: replace(s, pools=(pool("onprem", 4, []),)), "does not list this profile"),
    ],
)
def test_validate_rejects_broken_snapshots(change, message):
    validate(two_groups())
    with pytest.raises(SnapshotError, match=message):
        validate(change(two_groups()))


def test_borrowing_created_by_lend_is_reclaimed_by_the_next_pass():
    # B's reserved task lands on p0 (first in its list), then B is lent p1. A can use p0 only.
    s = snapshot(
        [pool("p0", 1, ["b-gpu", "a-gpu"]), pool("p1", 1, ["b-gpu"])],
        [profile("b-gpu", 1, ["p0", "p1"], ["B"]), profile("a-gpu", 1, ["p0"], ["A"])],
        [policy("A", 1, 1), policy("B", 1, 2)],
        [cr("a", "A", "a-gpu"), cr("b", "B", "b-gpu")],
        {"a": (waiting("a0", 3, 1),), "b": (waiting("b1", 1, 1), waiting("b2", 2, 1))},
    )
    first = allocate(s)
    assert [(p.task, p.pool, p.phase) for p in first.placements] == [
        ("b1", "p0", "fill"),
        ("b2", "p1", "lend"),
    ]
    assert first.preemptions == () and first.verdict("a0").rule == "behind_higher_priority"
    second = allocate(
        replace(
            s,
            waiting={"a": s.waiting["a"]},
            placed=(placed("b1", "b", "p0", 1, 1), placed("b2", "b", "p1", 1, 2)),
        )
    )
    assert [(p.task, p.reason) for p in second.preemptions] == [("b1", "reclaim")]
    assert [(p.task, p.pool) for p in second.placements] == [("a0", "p0")]


# -- spend caps -----------------------------------------------------------------------------


def _capped_estate(onprem_free=0, caps=None):
    """Pool `onprem` (2 GPUs) then `cloud` (8); A's and B's work overflows to cloud."""
    from apps.engine.core import SpendCap

    s = snapshot(
        [pool("onprem", 2, ["gpu"]), pool("cloud", 8, ["gpu"])],
        [profile("gpu", 1, ["onprem", "cloud"], ["A", "B"], size_from_task=True)],
        [policy("A", 0, 8), policy("B", 0, 8)],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {"a": (waiting("a0", 10, 1), waiting("a1", 11, 1)), "b": (waiting("b0", 20, 1),)},
        [placed("x0", "a", "cloud", 1, 1, ago_s=60)]
        + [placed(f"o{i}", "b", "onprem", 1, 2 + i, ago_s=50) for i in range(2 - onprem_free)],
    )
    if caps is None:
        caps = (SpendCap("cap:research", ("cloud",), frozenset({"A"}), datetime(2025, 2, 1, tzinfo=UTC)),)
    return replace(s, caps=caps)


def test_a_reached_spend_cap_keeps_its_policies_new_work_off_the_capped_pool():
    d = allocate(_capped_estate())
    assert [(p.task, p.pool) for p in d.placements] == [("b0", "cloud")]
    assert d.preemptions == (), "work already on the capped pool goes on"
    verdict = d.verdict("a0")
    assert (verdict.rule, verdict.pools, verdict.policy) == ("cloud_cap_reached", ("cloud",), "cap:research")
    assert verdict.reset_at == datetime(2025, 2, 1, tzinfo=UTC)
    assert d.verdict("a1").position == 2


def test_a_capped_policy_still_gets_room_on_its_other_pools():
    d = allocate(_capped_estate(onprem_free=1))
    assert [(p.task, p.pool) for p in d.placements] == [("a0", "onprem"), ("b0", "cloud")]
    # The room onprem had when the pass began went to a0, ahead of a1 in its queue.
    assert (d.verdict("a1").rule, d.verdict("a1").pools) == ("behind_higher_priority", ("onprem",))


def test_without_a_reached_cap_the_verdict_is_the_usual_one():
    d = allocate(_capped_estate(caps=()))
    assert {p.task for p in d.placements} == {"a0", "a1", "b0"}


def test_a_spend_cap_naming_an_unknown_pool_or_policy_is_refused():
    from apps.engine.core import SpendCap

    when = datetime(2025, 2, 1, tzinfo=UTC)
    with pytest.raises(SnapshotError, match="spend cap c: unknown pool nowhere"):
        validate(_capped_estate(caps=(SpendCap("c", ("nowhere",), frozenset({"A"}), when),)))
    with pytest.raises(SnapshotError, match="spend cap c: unknown policy Z"):
        validate(_capped_estate(caps=(SpendCap("c", ("cloud",), frozenset({"Z"}), when),)))


# -- several budget windows ---------------------------------------------------------------


def windows_estate(windows, running, queue, parent_windows=()):
    return snapshot(
        [pool("p", 8, ["gpu"])],
        [profile("gpu", 1, ["p"], ["A"])],
        [
            policy("A", 8, 8, parent="org", windows=windows),
            policy("org", 0, 8, windows=parent_windows),
        ],
        [cr("a", "A", "gpu")],
        {"a": tuple(waiting(t, i + 100, 1) for i, t in enumerate(queue))},
        [placed(t, "a", "p", 1, i, ago_s=100 - i) for i, t in enumerate(running)],
    )


def test_the_start_check_must_pass_in_every_window():
    # day: 0.8 h left; month: 0.5 h left; 2 running: a third needs 0.25 h x 3 = 0.75 h.
    d = allocate(windows_estate([window(1, 0.2, "day"), window(10, 9.5, "month")], ["r0", "r1"], ["w0"]))
    v = d.verdict("w0")
    assert placed_ids(d) == []
    assert (v.rule, v.cause, v.hours_left, v.hours_needed) == ("budget_start_check", "month", 0.5, 0.75)
    d = allocate(windows_estate([window(1, 0.2, "day"), window(10, 9, "month")], ["r0", "r1"], ["w0"]))
    assert placed_ids(d) == ["w0"]


def test_one_used_up_window_stops_the_work_and_the_event_names_it():
    d = allocate(windows_estate([window(1, 1, "day"), window(10, 2, "month")], ["r0", "r1"], ["w0"]))
    assert [(p.task, p.reason, p.window) for p in d.preemptions] == [
        ("r1", "budget", "day"),
        ("r0", "budget", "day"),
    ]
    v = d.verdict("w0")
    assert (v.rule, v.cause, v.reset_at) == ("budget_used_up", "day", datetime(2025, 1, 9, tzinfo=UTC))


def test_with_several_windows_used_up_the_one_that_resets_last_is_named():
    d = allocate(windows_estate([window(1, 1, "day"), window(10, 10, "month")], ["r0"], ["w0"]))
    assert [p.window for p in d.preemptions] == ["month"]
    v = d.verdict("w0")
    assert (v.cause, v.reset_at) == ("month", datetime(2025, 2, 1, tzinfo=UTC))


def test_an_ancestor_window_applies_to_its_subtree():
    d = allocate(
        windows_estate(
            [window(1, 0, "day")], ["r0"], ["w0"], parent_windows=[window(5, 1, "day"), window(5, 5, "week")]
        )
    )
    assert [(p.task, p.window) for p in d.preemptions] == [("r0", "week")]
    v = d.verdict("w0")
    assert (v.rule, v.policy, v.cause) == ("budget_used_up", "org", "week")


# -- anti-thrash ----------------------------------------------------------------------------


def guarded(min_runtime_s=0, cap=None, reclaims=(), a_waiting=1):
    """A reserves 2 of pool onprem (4); B (reservation 2) borrows all 4: b0..b3 placed 100..97 s ago."""
    return snapshot(
        [pool("onprem", 4, ["gpu"])],
        [profile("gpu", 1, ["onprem"], ["A", "B"], min_runtime_s=min_runtime_s)],
        [policy("A", 2, 4), policy("B", 2, 4, cap=cap, reclaims=reclaims)],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {"a": tuple(waiting(f"a{i}", 100 + i, 1) for i in range(a_waiting))},
        [placed(f"b{i}", "b", "onprem", 1, i, ago_s=100 - i) for i in range(4)],
    )


def test_reclaim_waits_while_every_victim_is_within_its_minimum_runtime():
    d = allocate(guarded(min_runtime_s=600))
    assert d.preemptions == () and d.placements == ()
    v = d.verdict("a0")
    assert (v.rule, v.cause, v.pools) == ("reclaim_held", "min_runtime", ("onprem",))
    assert v.reset_at == NOW + timedelta(seconds=600 - 97)


def test_reclaim_takes_an_older_victim_past_its_minimum_runtime_instead():
    d = allocate(guarded(min_runtime_s=98))
    assert preempted_ids(d) == ["b2"] and placed_ids(d) == ["a0"]


def test_a_policy_at_its_preemption_cap_is_not_a_victim_until_the_hour_has_passed():
    d = allocate(guarded(cap=1, reclaims=[NOW - timedelta(seconds=1800)]))
    assert d.preemptions == ()
    v = d.verdict("a0")
    assert (v.rule, v.cause, v.reset_at) == ("reclaim_held", "max_preemptions", NOW + timedelta(seconds=1800))
    d = allocate(guarded(cap=1, reclaims=[NOW - timedelta(seconds=3601)]))
    assert preempted_ids(d) == ["b3"]


def test_the_cap_counts_the_reclaims_of_this_pass():
    d = allocate(guarded(cap=1, a_waiting=2))
    assert preempted_ids(d) == ["b3"] and placed_ids(d) == ["a0"]
    v = d.verdict("a1")
    assert (v.rule, v.cause, v.reset_at) == ("reclaim_held", "max_preemptions", NOW + timedelta(hours=1))


def test_a_cap_of_zero_means_never_a_victim():
    d = allocate(guarded(cap=0))
    assert d.preemptions == () and d.verdict("a0").rule == "no_capacity"
