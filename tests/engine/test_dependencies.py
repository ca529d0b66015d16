"""Issue 35, rule 2, in the core: queued tasks whose dependencies have not all ended come as
`Snapshot.held`, not in the queues. The pass never places them and gives each the verdict
dependency (`waits_for`; position 0: it is not in line, and the waiting tasks' positions do not
count it)."""

from dataclasses import replace

import pytest
from engine_helpers import cr, placed, policy, pool, profile, snapshot, waiting

from apps.engine.core import HeldTask, SnapshotError, allocate, validate
from apps.engine.core.decisions import RULES, Verdict


def _estate(queue=(), held=(), running=()):
    s = replace(
        snapshot(
            [pool("onprem", 4, ["gpu"])],
            [profile("gpu", 1, ["onprem"], ["A"], size_from_task=True)],
            [policy("A", 2, 8)],
            [cr("a", "A", "gpu")],
            {"a": tuple(queue)},
            running,
        ),
        held=tuple(held),
    )
    validate(s)
    return s


def test_dependency_is_a_rule_of_the_core():
    assert "dependency" in RULES


def test_dependency_a_held_task_is_never_placed_and_its_verdict_names_what_it_waits_for():
    held = HeldTask("b", "a", 5, ("x", "y"))
    d = allocate(_estate(held=[held]))
    assert d.placements == ()
    assert d.verdict("b") == Verdict("b", "a", 0, "dependency", waits_for=("x", "y"))
    assert d.held_verdicts() == (d.verdict("b"),)
    assert list(d.verdicts()) == [d.verdict("b")]


def test_dependency_held_tasks_are_not_counted_in_the_waiting_tasks_positions():
    """a1 fills the pool; a2 and a3 wait, 1st and 2nd in line, whatever is held before them."""
    d = allocate(
        _estate(
            queue=[waiting("a2", 3, 1), waiting("a3", 4, 1)],
            held=[HeldTask("h1", "a", 1, ("a1",)), HeldTask("h2", "a", 2, ("a1",))],
            running=[placed("a1", "a", "onprem", 4, 0, ago_s=10)],
        )
    )
    assert [(v.task, v.position, v.rule) for v in d.verdicts()] == [
        ("a2", 1, "no_capacity"),
        ("a3", 2, "no_capacity"),
        ("h1", 0, "dependency"),
        ("h2", 0, "dependency"),
    ]
    assert d.group_verdict("a", 1000).rule == "no_capacity"
    assert [v.task for v in d.held_verdicts()] == ["h1", "h2"]


def test_dependency_a_held_task_leaves_the_pass_as_it_would_be_without_it():
    queue = [waiting("a1", 1, 1), waiting("a2", 2, 2)]
    plain = allocate(_estate(queue=queue))
    held = allocate(_estate(queue=queue, held=[HeldTask("h", "a", 0, ("z",))]))
    assert held == plain
    assert held.verdict("a1") is None and held.verdict("nothing") is None


@pytest.mark.parametrize(
    "held, message",
    [
        (HeldTask("a1", "a", 9, ("z",)), "task a1: appears twice"),
        (HeldTask("h", "nowhere", 9, ("z",)), "held h: unknown compute resource nowhere"),
        (HeldTask("h", "a", 9, ()), "held h: waits for nothing"),
    ],
)
def test_dependency_validate_refuses_a_held_task_that_breaks_the_contract(held, message):
    s = replace(_estate(queue=[waiting("a1", 1, 1)]), held=(held,))
    with pytest.raises(SnapshotError, match=message):
        validate(s)
