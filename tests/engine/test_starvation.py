"""Rule 4 of issue 34, the starvation guard (docs/engine.md, "The starvation guard"): a queue head
that has waited its profile's starvation_s for free GPUs holds the pool of its list with the most
free GPUs; on a held pool only the holder starts (fill and lend), reclaim is not held back; the
holder's verdict is "starving", work kept off the pool gets "starvation_hold"."""

import io
import re
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

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
from apps.engine.core.simulator import main
from tests.engine.test_properties import estates

NOW = datetime(2025, 1, 6, 0, 20, tzinfo=UTC)
G = 1000


def estate(waited_min=15, starvation_s=600, running_p=3, running_q=2, b_res=0, small=3):
    """Pools P and Q of 4 GPUs; A's 4-GPU big has waited `waited_min`; B runs 1-GPU tasks and has
    `small` 1-GPU tasks waiting behind it in the pass order."""
    running = [("P", i) for i in range(running_p)] + [("Q", running_p + i) for i in range(running_q)]
    s = Snapshot(
        now=NOW,
        pools=(Pool("P", 4 * G, ("g",)), Pool("Q", 4 * G, ("g",))),
        profiles=(Profile("g", G, ("P", "Q"), ("A", "B"), size_from_task=True, starvation_s=starvation_s),),
        policies=(Policy("A", 0, 8 * G), Policy("B", b_res * G, 8 * G)),
        resources=(ComputeResource("a", "A", "g"), ComputeResource("b", "B", "g")),
        waiting={
            "a": (WaitingTask("big", 10, 4 * G, since=NOW - timedelta(minutes=waited_min)),),
            "b": tuple(WaitingTask(f"s{i}", 20 + i, G, since=NOW) for i in range(small)),
        },
        placed=tuple(
            PlacedTask(f"r{k}", "b", pool, G, k, NOW - timedelta(minutes=30)) for pool, k in running
        ),
    )
    validate(s)
    return s


def test_starvation_the_head_holds_the_pool_with_most_free_gpus_and_others_start_elsewhere():
    # P has 1 free GPU, Q 2: big holds Q; s0 starts on P; s1 and s2 are kept off Q.
    d = allocate(estate())
    assert [(p.task, p.pool, p.phase) for p in d.placements] == [("s0", "P", "lend")]
    v = d.verdict("big")
    assert (v.rule, v.pools, v.needed, v.free) == ("starving", ("Q",), 4000, 2000)
    kept = d.verdict("s1")
    assert (kept.rule, kept.pools, kept.cause) == ("starvation_hold", ("Q",), "big")
    assert d.holders() == (v,)
    assert d.group_verdict("b", 1000).rule == "starvation_hold"


def test_starvation_no_hold_before_starvation_s():
    d = allocate(estate(waited_min=9))
    assert [(p.task, p.pool) for p in d.placements] == [("s0", "P"), ("s1", "Q"), ("s2", "Q")]
    assert d.verdict("big").rule == "no_capacity" and d.holders() == ()


def test_starvation_off_when_the_profile_has_no_starvation_s():
    assert allocate(estate(starvation_s=None)) == allocate(estate(waited_min=9))


def test_starvation_a_head_that_fits_somewhere_holds_nothing_and_starts():
    d = allocate(estate(running_q=0))
    assert [(p.task, p.pool, p.phase) for p in d.placements] == [("s0", "P", "lend"), ("big", "Q", "lend")]
    assert d.holders() == ()


def test_starvation_reclaim_is_not_held_back():
    # B has a reservation of 8: its 1-GPU tasks are reservation-eligible; s0 fills P, and s1 and
    # s2, kept off the held Q in the fill, start there through the reclaim phase (free GPUs first).
    d = allocate(estate(b_res=8, small=3))
    assert [(p.task, p.pool, p.phase) for p in d.placements] == [
        ("s0", "P", "fill"),
        ("s1", "Q", "reclaim"),
        ("s2", "Q", "reclaim"),
    ]


def test_starvation_a_head_held_by_its_limit_holds_nothing():
    # A's limit is 3 GPUs: its 4-GPU big waits for its limit, not for free GPUs.
    s = estate()
    s = replace(s, policies=(Policy("A", 0, 3 * G), s.policies[1]))
    d = allocate(s)
    assert d.holders() == () and d.verdict("big").rule == "policy_limit"
    assert [p.task for p in d.placements] == ["s0", "s1", "s2"]


@st.composite
def starving(draw):
    """A random estate (test_properties.estates) with a starvation guard on some profiles and
    waiting times on its tasks."""
    s = draw(estates())
    profiles = tuple(replace(f, starvation_s=draw(st.sampled_from([None, 0, 600, 3600]))) for f in s.profiles)
    ages = st.sampled_from([0, 700, 7200])
    waiting = {
        rid: tuple(replace(t, since=NOW - timedelta(seconds=draw(ages))) for t in q)
        for rid, q in s.waiting.items()
    }
    return replace(s, profiles=profiles, waiting=waiting, now=NOW)


def _holds(s):
    """The holds the guard takes, recomputed here from the rule's words (no budgets, caps or
    stopping work in play: `_plain`)."""
    pol = {p.id: p for p in s.policies}
    res = {r.id: r for r in s.resources}
    prof = {f.id: f for f in s.profiles}
    pool = {p.id: p for p in s.pools}
    occ, use = {}, {}
    for t in s.placed:
        if not t.preempting:
            occ[t.pool] = occ.get(t.pool, 0) + t.size
            q = res[t.resource].policy
            while q is not None:
                use[q] = use.get(q, 0) + t.size
                q = pol[q].parent
    heads = []
    order = [r.id for r in s.resources]
    for rid, queue in s.waiting.items():
        f = prof[res[rid].profile]
        if queue and f.starvation_s is not None:
            head = queue[0]
            if (s.now - head.since).total_seconds() >= f.starvation_s:
                heads.append((head.since, head.seq, order.index(rid), rid, head))
    held = {}
    for *_, rid, t in sorted(heads, key=lambda h: h[:3]):
        q, ok = res[rid].policy, True
        while q is not None:
            ok &= use.get(q, 0) + t.size <= pol[q].limit
            q = pol[q].parent
        pools = [p for p in prof[res[rid].profile].pools if pool[p].enabled and pool[p].capacity >= t.size]
        if not ok or not pools or any(pool[p].capacity - occ.get(p, 0) >= t.size for p in pools):
            continue
        free = [p for p in pools if p not in held]
        if free:
            held[max(free, key=lambda p: (pool[p].capacity - occ.get(p, 0), -free.index(p)))] = t.id
    return held


def _plain(s):
    return not s.caps and all(not p.budgets for p in s.policies) and all(not t.preempting for t in s.placed)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(starving())
def test_starvation_property_a_held_pool_starts_no_other_work_in_fill_or_lend(s):
    d = allocate(s)
    assert d == allocate(s)
    if not _plain(s):
        return
    held = _holds(s)
    started: set[str] = set()
    for p in d.placements:
        # a hold ends when its holder starts (e.g. by reclaim): work may follow it there
        if p.phase in ("fill", "lend", "priority") and p.pool in held and held[p.pool] not in started:
            assert held[p.pool] == p.task, f"{p.task} started on {p.pool}, held for {held[p.pool]}"
        started.add(p.task)
    holders = {v.task: v for v in d.holders()}
    placed = {p.task for p in d.placements}
    for tid in held.values():
        assert tid in placed or tid in holders or d.verdict(tid).rule not in ("no_capacity",)
    for v in d.verdicts():
        if v.rule == "starvation_hold":
            assert v.pools[0] in held and held[v.pools[0]] == v.cause


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(starving())
def test_starvation_property_off_or_not_yet_due_changes_nothing(s):
    """No guard, or no task waited long enough: the decisions and verdicts of a pass without it."""
    off = replace(s, profiles=tuple(replace(f, starvation_s=None) for f in s.profiles))
    not_due = replace(s, profiles=tuple(replace(f, starvation_s=10**9) for f in s.profiles))
    a, b = allocate(off), allocate(not_due)
    assert a == b and list(a.verdicts()) == list(b.verdicts())


def test_starvation_a_hold_ends_when_its_holder_starts_by_reclaim_and_work_may_follow_it():
    # B's head holds P (it starves; P is full of A's borrowed work). Reclaim stops A's 4-GPU task
    # for B's 1-GPU reservation and starts the holder: the hold ends, and A's own head, waiting
    # behind, takes the room left in the lend (found by the property below, shrunk).
    s = Snapshot(
        now=NOW,
        pools=(Pool("P", 4 * G, ("g",)),),
        profiles=(Profile("g", G, ("P",), ("A", "B"), size_from_task=True, starvation_s=0),),
        policies=(Policy("A", 0, 4 * G), Policy("B", G, G)),
        resources=(ComputeResource("a", "A", "g"), ComputeResource("b", "B", "g")),
        waiting={
            "a": (WaitingTask("a-head", 1, G, since=NOW),),
            "b": (WaitingTask("b-head", 2, G, since=NOW),),
        },
        placed=(PlacedTask("a-run", "a", "P", 4 * G, 0, NOW - timedelta(minutes=30)),),
    )
    validate(s)
    d = allocate(s)
    assert [(p.task, p.reason) for p in d.preemptions] == [("a-run", "reclaim")]
    assert [(p.task, p.phase) for p in d.placements] == [("b-head", "reclaim"), ("a-head", "lend")]


def _doc_section() -> str:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "engine.md").read_text()
    return doc.split("## 10b. Worked examples", 1)[1].split("\n## ", 1)[0]


def test_starvation_and_priority_the_worked_examples_in_the_docs_print_what_they_show():
    section = _doc_section()
    runs = re.findall(
        r"```\n\$ python -m apps.engine.core.simulator (\S+) --until (\d+)\n(.*?)```", section, re.S
    )
    assert [Path(path).stem for path, _, _ in runs] == ["priority_classes", "starvation"]
    root = Path(__file__).resolve().parents[2]
    for path, until, printed in runs:
        out = io.StringIO()
        assert main([str(root / path), "--until", until], stdout=out) == 0
        assert out.getvalue().splitlines()[:-1] == printed.strip().splitlines(), path
    code, printed = re.findall(r"```(?:python)?\n(.*?)```", section, re.S)[2:4]
    scope: dict = {}
    exec("from datetime import UTC, datetime, timedelta\nfrom apps.engine.core import *\n" + code, scope)
    d = scope["d"]
    shown = [*d.preemptions, *d.placements, *d.verdicts()]
    assert [repr(x) for x in shown] == printed.strip().splitlines()
