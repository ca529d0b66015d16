"""Issue 37 part 4, lost work in the engine (docs/engine.md, "Lost work"): among victims of the
same standing (the same rule and the same policy), reclaim and the priority phase take the work
that loses least first (GPUs x time since its last checkpoint or its run's start), then the newest
placed; `lost_work` is that figure in milli-GPU-microseconds."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from apps.engine.core import (
    NOT_STARTED,
    ComputeResource,
    PlacedTask,
    Policy,
    Pool,
    Profile,
    Snapshot,
    WaitingTask,
    allocate,
    validate,
)
from apps.engine.core.pass_reclaim import lost_work

NOW = datetime(2025, 1, 6, 12, 0, tzinfo=UTC)
G = 1000
GPU_HOUR = G * 3_600_000_000  # milli-GPU-microseconds


def estate(running, waiting, a=(4, 8), b=(0, 8), capacity=8, min_runtime_s=0):
    """One 8-GPU pool; running: (id, policy, GPUs, minutes placed ago, minutes since checkpoint
    or None, priority); waiting: (id, policy, GPUs, priority)."""
    placed = tuple(
        PlacedTask(
            tid,
            pol.lower(),
            "P",
            gpus * G,
            k,
            NOW - timedelta(minutes=ago),
            priority=prio,
            saved_at=None if saved is None else NOW - timedelta(minutes=saved),
        )
        for k, (tid, pol, gpus, ago, saved, prio) in enumerate(running)
    )
    queues: dict[str, list] = {}
    for k, (tid, pol, gpus, prio) in enumerate(waiting):
        queues.setdefault(pol.lower(), []).append(WaitingTask(tid, 100 + k, gpus * G, prio))
    s = Snapshot(
        now=NOW,
        pools=(Pool("P", capacity * G, ("g",)),),
        profiles=(Profile("g", G, ("P",), ("A", "B"), size_from_task=True, min_runtime_s=min_runtime_s),),
        policies=(Policy("A", a[0] * G, a[1] * G), Policy("B", b[0] * G, b[1] * G)),
        resources=(ComputeResource("a", "A", "g"), ComputeResource("b", "B", "g")),
        waiting={r: tuple(sorted(q, key=lambda t: t.key)) for r, q in queues.items()},
        placed=tuple(sorted(placed, key=lambda t: (t.placed_at, t.seq))),
    )
    validate(s)
    return s


def test_lost_work_is_gpus_times_the_time_since_the_last_checkpoint_or_the_run_start():
    t = PlacedTask("t", "b", "P", 2 * G, 1, NOW - timedelta(hours=3), saved_at=NOW - timedelta(minutes=15))
    assert lost_work(t, NOW) == GPU_HOUR // 2  # 2 GPUs x 15 minutes = 0.5 GPU-hours
    unsaved = PlacedTask("u", "b", "P", 2 * G, 1, NOW - timedelta(hours=3))
    assert lost_work(unsaved, NOW) == 6 * GPU_HOUR


# The worked example of docs/engine.md, "Lost work".
WORKED = [
    ("b4", "B", 2, 240, 6, 0),
    ("b1", "B", 2, 180, 15, 0),
    ("b2", "B", 2, 60, None, 0),
    ("b3", "B", 2, 30, None, 0),
]


def test_lost_work_reclaim_takes_the_victims_that_lose_least_in_the_same_policy():
    # B borrows all 8 GPUs; A's 4-GPU task inside its reservation takes 4 back. Newest first would
    # take b3 and b2 (1.0 + 2.0 = 3.0 GPU-hours lost); least lost work takes b4 (2 GPUs x 6 min =
    # 0.2) and b1 (2 x 15 min = 0.5): 0.7 GPU-hours.
    s = estate(WORKED, [("a0", "A", 4, 0)])
    d = allocate(s)
    assert [(p.task, p.reason) for p in d.preemptions] == [("b4", "reclaim"), ("b1", "reclaim")]
    assert [p.task for p in d.placements] == ["a0"]
    by_id = {t.id: t for t in s.placed}
    lost = sum(lost_work(by_id[p.task], NOW) for p in d.preemptions)
    assert lost * 10 == 7 * GPU_HOUR


def test_lost_work_of_work_placed_but_not_started_is_nothing_so_it_is_taken_first():
    # b9 was placed 50 minutes ago and has not started (its node still boots): it loses nothing, so
    # it goes before b4, checkpointed 6 minutes ago, though the placement is older (it takes b3's
    # place in the worked example).
    booting = PlacedTask("b9", "b", "P", 2 * G, 9, NOW - timedelta(minutes=50), saved_at=NOT_STARTED)
    assert lost_work(booting, NOW) == 0
    s = estate(WORKED[:3], [("a0", "A", 2, 0)])
    s = replace(s, placed=tuple(sorted((*s.placed, booting), key=lambda t: (t.placed_at, t.seq))))
    validate(s)
    assert [p.task for p in allocate(s).preemptions] == ["b9"]


def test_lost_work_equal_losses_keep_todays_order_newest_placed_first():
    running = [("b0", "B", 2, 40, 10, 0), ("b1", "B", 2, 30, 10, 0), ("b2", "B", 2, 20, 10, 0)]
    running.append(("b3", "B", 2, 50, 10, 0))
    d = allocate(estate(running, [("a0", "A", 2, 0)]))
    assert [p.task for p in d.preemptions] == ["b2"]


def test_lost_work_priority_phase_takes_the_lower_work_that_loses_least():
    # A at its limit 4 runs four 1-GPU priority-0 tasks; its 2-GPU priority-200 task takes the two
    # that lose least: l0 (checkpointed 1 min ago) and l2 (2 min), not the youngest l3 and l2.
    running = [
        ("l0", "A", 1, 40, 1, 0),
        ("l1", "A", 1, 30, None, 0),
        ("l2", "A", 1, 20, 2, 0),
        ("l3", "A", 1, 10, None, 0),
    ]
    d = allocate(estate(running, [("h", "A", 2, 200)], a=(2, 4), b=(2, 4)))
    assert sorted((p.task, p.reason) for p in d.preemptions) == [("l0", "priority"), ("l2", "priority")]
    assert [p.task for p in d.placements] == ["h"]


def test_lost_work_order_falls_back_to_newest_first_when_it_finds_no_room():
    # B (reservation 2) runs b2 (1 GPU, 11 min), b1 (4 GPUs, 10 min) and b0 (1 GPU, just placed,
    # protected by the 10-minute minimum runtime). A's 2-GPU task needs 2 of B's 4 borrowed GPUs:
    # least lost work takes b2 (11 GPU-min) and then may not take b1 (B would fall to 1 < 2); newest
    # first (b0 protected) takes b1, which keeps B at its reservation.
    running = [("b2", "B", 1, 11, None, 0), ("b1", "B", 4, 10, None, 0), ("b0", "B", 1, 0, None, 0)]
    d = allocate(estate(running, [("a0", "A", 2, 0)], a=(2, 8), b=(2, 8), capacity=6, min_runtime_s=600))
    assert [(p.task, p.reason) for p in d.preemptions] == [("b1", "reclaim")]
    assert [p.task for p in d.placements] == ["a0"]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 3), st.integers(1, 300), st.one_of(st.none(), st.integers(0, 300))),
        min_size=1,
        max_size=8,
    ),
    st.integers(1, 4),
)
def test_lost_work_property_no_same_standing_swap_loses_less(running, want):
    """Reclaim in one borrowing policy: no victim could be swapped for a running non-victim of the
    same policy at least as large that loses less (that swap would also make room)."""
    rows, used = [], 0
    for k, (gpus, ago, saved) in enumerate(running):
        if used + gpus > 8:
            break
        used += gpus
        rows.append((f"b{k}", "B", gpus, ago, None if saved is None else min(saved, ago), 0))
    s = estate(rows, [("a0", "A", want, 0)])
    d = allocate(s)
    by_id = {t.id: t for t in s.placed}
    victims = {p.task for p in d.preemptions}
    for v in victims:
        for n in by_id.values():
            if n.id not in victims and n.size >= by_id[v].size:
                assert lost_work(n, NOW) >= lost_work(by_id[v], NOW)
