"""Rule: reclaim from an ancestor's own work counts the reclaimer's placement inside the ancestor
(docs/engine.md, section 3, "Reclaim"; worked example in section 9)."""

from hypothesis import given, settings
from hypothesis import strategies as st

from apps.engine.core import allocate, validate
from tests.engine.engine_helpers import cr, placed, policy, pool, profile, snapshot, waiting


def estate(reservation, limit, own, size, child_res, child_size):
    """A department running `own` tasks of `size` GPUs of its own on a full pool, and its team
    (inside its reservation) waiting for `child_size` GPUs."""
    used = own * size
    return snapshot(
        [pool("p", used, ["f"])],
        [profile("f", 1, ["p"], ["dept", "team"], size_from_task=True)],
        [policy("dept", reservation, limit), policy("team", child_res, child_res, parent="dept")],
        [cr("d", "dept", "f"), cr("t", "team", "f")],
        {"t": [waiting("w", 100, child_size)]},
        [placed(f"d{i}", "d", "p", size, i, ago_s=60 - i) for i in range(own)],
    )


def test_the_worked_example_a_team_takes_one_of_its_departments_two_tasks():
    d = allocate(estate(3, 4, own=2, size=2, child_res=2, child_size=1))
    assert [(p.task, p.reason, p.for_task) for p in d.preemptions] == [("d1", "reclaim", "w")]
    assert [(p.task, p.phase) for p in d.placements] == [("w", "reclaim")]


@st.composite
def ancestor_estates(draw):
    size = draw(st.integers(1, 4))
    own = draw(st.integers(1, 5))
    used = own * size
    reservation = draw(st.integers(max(0, used - size + 1), used))  # above it by less than one task
    limit = draw(st.integers(used, used + 4))
    child_size = draw(st.integers(1, size))
    child_res = draw(st.integers(child_size, max(child_size, reservation)))
    return reservation, limit, own, size, child_res, child_size


@settings(max_examples=300, deadline=None)
@given(ancestor_estates())
def test_reclaim_from_an_ancestor_takes_its_work_exactly_when_it_ends_at_or_above_its_reservation(args):
    reservation, limit, own, size, child_res, child_size = args
    s = estate(*args)
    validate(s)
    d = allocate(s)
    allowed = own * size - size + child_size >= reservation
    if allowed and child_size <= limit:
        assert len(d.preemptions) == 1 and d.preemptions[0].reason == "reclaim"
        assert [p.task for p in d.placements] == ["w"]
    else:
        assert not d.preemptions and not d.placements
    after = own * size - size * len(d.preemptions) + child_size * len(d.placements)
    assert after >= min(reservation, own * size), "the department ends at or above its reservation"
    assert after <= limit
