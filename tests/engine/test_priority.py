"""Rule 2 of issue 34, priority inside a policy (docs/engine.md, "The priority phase"): a waiting
task whose policy is at its limit, or that is inside its reservation with no room on the pool,
preempts the same policy's running work of strictly lower priority, youngest placed first, all or
nothing (reason and phase "priority"); never another policy's work."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.engine.core import (
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
from tests.engine.test_properties import estates

NOW = datetime(2025, 1, 6, 0, 10, tzinfo=UTC)
G = 1000


def estate(a=(2, 4), b=(2, 4), capacity=8, running=(), waiting=(), min_runtime_s=0):
    """One pool, one size_from_task profile, groups A and B; running: (id, policy, GPUs, priority,
    minutes ago); waiting: (id, policy, GPUs, priority)."""
    placed = tuple(
        PlacedTask(tid, pol.lower(), "P", gpus * G, k, NOW - timedelta(minutes=ago), priority=prio)
        for k, (tid, pol, gpus, prio, ago) in enumerate(running)
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


def moves(d):
    return [(p.task, p.reason, p.for_task) for p in d.preemptions], [(p.task, p.phase) for p in d.placements]


def test_priority_at_its_limit_a_task_preempts_its_groups_youngest_lower_priority_work():
    # A (limit 4) runs four 1-GPU priority-0 tasks; a 2-GPU priority-200 task takes the two
    # youngest (l3 placed 1 min ago, then l2 2 min ago) although the pool has 4 GPUs free.
    running = [("l0", "A", 1, 0, 4), ("l1", "A", 1, 0, 3), ("l2", "A", 1, 0, 2), ("l3", "A", 1, 0, 1)]
    d = allocate(estate(running=running, waiting=[("h", "A", 2, 200)]))
    assert moves(d) == ([("l3", "priority", "h"), ("l2", "priority", "h")], [("h", "priority")])


def test_priority_inside_its_reservation_with_no_free_gpu_a_task_preempts_its_own_lower_work():
    # A reservation 3, B reservation 2, pool 4 (reservations oversubscribed): A runs 2, B runs 2
    # at its reservation, so reclaim has nothing to take. A's priority-100 task takes a1, A's own.
    running = [("a0", "A", 1, 0, 5), ("a1", "A", 1, 0, 4), ("b0", "B", 1, 0, 3), ("b1", "B", 1, 0, 2)]
    d = allocate(estate(a=(3, 3), b=(2, 2), capacity=4, running=running, waiting=[("h", "A", 1, 100)]))
    assert moves(d) == ([("a1", "priority", "h")], [("h", "priority")])


def test_priority_never_preempts_another_groups_work():
    # B's work is priority 0 and the youngest; A's waiting task outranks nothing of A's own.
    running = [("a0", "A", 1, 300, 5), ("a1", "A", 1, 300, 4), ("b0", "B", 1, 0, 3), ("b1", "B", 1, 0, 2)]
    d = allocate(estate(a=(3, 3), b=(2, 2), capacity=4, running=running, waiting=[("h", "A", 1, 100)]))
    assert moves(d) == ([], [])
    assert d.verdict("h").rule == "no_capacity"


def test_priority_equal_priority_is_not_preempted():
    running = [("l0", "A", 2, 100, 3), ("l1", "A", 2, 100, 2)]
    d = allocate(estate(running=running, waiting=[("h", "A", 2, 100)]))
    assert moves(d) == ([], [])
    assert d.verdict("h").rule == "policy_limit"


def test_priority_borrowing_below_its_limit_with_a_full_pool_does_not_preempt():
    # A (reservation 2, limit 4) borrows 1 GPU, B fills the rest: A is neither at its limit nor
    # inside its reservation, so its urgent task waits; B is at its reservation, nothing to reclaim.
    running = [("a0", "A", 1, 0, 5), ("a1", "A", 1, 0, 4), ("a2", "A", 1, 0, 3), ("b0", "B", 1, 0, 2)]
    d = allocate(estate(b=(1, 4), capacity=4, running=running, waiting=[("h", "A", 1, 200)]))
    assert moves(d) == ([], [])


def test_priority_all_or_nothing_when_lower_work_cannot_free_enough():
    # A at its limit 4 with one priority-0 task of 1 GPU and three of priority 500: a 2-GPU
    # priority-200 task would need 2 GPUs of lower work: nothing is preempted.
    running = [("l0", "A", 1, 0, 4), ("x1", "A", 1, 500, 3), ("x2", "A", 1, 500, 2), ("x3", "A", 1, 500, 1)]
    d = allocate(estate(running=running, waiting=[("h", "A", 2, 200)]))
    assert moves(d) == ([], [])
    assert d.verdict("h").rule == "policy_limit"


def test_priority_a_group_never_borrows_more_through_priority():
    # A (reservation 2, limit 4) runs 3 GPUs, one free under its limit: the 3-GPU urgent task
    # replaces three GPUs of A's own (it does not take the free GPU ahead of other borrowers).
    running = [("l0", "A", 1, 0, 4), ("l1", "A", 1, 0, 3), ("l2", "A", 1, 0, 2)]
    d = allocate(estate(running=running, waiting=[("h", "A", 3, 200)]))
    assert moves(d) == (
        [("l2", "priority", "h"), ("l1", "priority", "h"), ("l0", "priority", "h")],
        [("h", "priority")],
    )


def test_priority_spares_work_within_its_minimum_runtime():
    running = [("old", "A", 1, 0, 30), ("l1", "A", 1, 0, 20), ("l2", "A", 1, 0, 15), ("new", "A", 1, 0, 1)]
    d = allocate(estate(running=running, waiting=[("h", "A", 1, 200)], min_runtime_s=600))
    assert moves(d) == ([("l2", "priority", "h")], [("h", "priority")])


def test_priority_uniform_priorities_give_the_decisions_of_no_priorities():
    running = [("l0", "A", 1, 0, 4), ("l1", "A", 1, 0, 3), ("l2", "A", 1, 0, 2), ("l3", "A", 1, 0, 1)]
    plain = allocate(estate(running=running, waiting=[("h", "A", 2, 0)]))
    shifted = [(t, p, g, 70, ago) for t, p, g, _, ago in running]
    same = allocate(estate(running=shifted, waiting=[("h", "A", 2, 70)]))
    assert plain == same and moves(plain) == ([], [])


@st.composite
def prioritised(draw):
    """A random estate (test_properties.estates) with random priorities on its tasks."""
    s = draw(estates())
    levels = st.sampled_from([0, 0, 100, 200, -50])
    placed = tuple(replace(t, priority=draw(levels)) for t in s.placed)
    waiting = {
        rid: tuple(sorted((replace(t, priority=draw(levels)) for t in q), key=lambda t: t.key))
        for rid, q in s.waiting.items()
    }
    return replace(s, placed=placed, waiting=waiting)


def _policy_of(s):
    pol = {r.id: r.policy for r in s.resources}
    by_task = {t.id: pol[t.resource] for t in s.placed}
    by_task.update({t.id: pol[rid] for rid, q in s.waiting.items() for t in q})
    return by_task


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(prioritised())
def test_priority_property_never_another_policys_work_and_only_strictly_lower_priority(s):
    d = allocate(s)
    assert d == allocate(s)
    policy_of = _policy_of(s)
    prio = {t.id: t.priority for t in s.placed} | {t.id: t.priority for q in s.waiting.values() for t in q}
    placed_at = {t.id: t.placed_at for t in s.placed}
    min_run = {r.id: next(f.min_runtime_s for f in s.profiles if f.id == r.profile) for r in s.resources}
    placed_by_priority = {p.task for p in d.placements if p.phase == "priority"}
    for p in d.preemptions:
        if p.reason != "priority":
            continue
        assert policy_of[p.task] == policy_of[p.for_task], "priority preempted another policy's work"
        assert prio[p.task] < prio[p.for_task], "priority preempted work of equal or higher priority"
        assert p.for_task in placed_by_priority, "not all or nothing"
        assert s.now - placed_at[p.task] >= timedelta(seconds=min_run[p.resource])
    assert placed_by_priority <= {p.for_task for p in d.preemptions if p.reason == "priority"}
    # Limits and capacity hold with priority placements.
    gone = {p.task for p in d.preemptions}
    size = {t.id: t.size for q in s.waiting.values() for t in q}
    occ: dict[str, int] = {}
    for t in s.placed:
        if not t.preempting and t.id not in gone:
            occ[t.pool] = occ.get(t.pool, 0) + t.size
    for p in d.placements:
        occ[p.pool] = occ.get(p.pool, 0) + size[p.task]
    assert all(occ[p.id] <= p.capacity for p in s.pools if p.id in occ)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(estates(), st.integers(-100, 100))
def test_priority_property_priorities_that_do_not_differ_inside_a_policy_change_nothing(s, shift):
    """Every task of a policy at one priority (a different one per policy): the same decisions and
    verdicts as with none, so priority never changes what a group may take from another."""
    level = {p.id: shift * k for k, p in enumerate(s.policies)}
    pol = {r.id: r.policy for r in s.resources}
    shifted = replace(
        s,
        placed=tuple(replace(t, priority=level[pol[t.resource]]) for t in s.placed),
        waiting={rid: tuple(replace(t, priority=level[pol[rid]]) for t in q) for rid, q in s.waiting.items()},
    )
    plain, other = allocate(s), allocate(shifted)
    assert plain == other
    assert list(plain.verdicts()) == list(other.verdicts())
