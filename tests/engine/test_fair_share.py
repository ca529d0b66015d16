"""Rule 1 of issue 34: fair sharing of borrowed GPUs under a parent that lends "fair", and rule 3:
lending limits (docs/engine.md, "Fair sharing" and "Lending limits", with the worked examples)."""

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.engine.core import PlacedTask, allocate, validate
from apps.engine.core.allocator import _Pass
from apps.engine.core.fair import Claim, fair_shares
from apps.engine.core.verdicts import VerdictBook
from tests.engine.engine_helpers import NOW, G, cr, placed, policy, pool, profile, snapshot, waiting


def fair(p, weight=1, lending="priority"):
    return replace(p, over_quota_weight=round(weight * G), lending=lending)


def research(vision_running=(), speech_running=(), vision_waiting=60, speech_waiting=60, lending="fair"):
    """The worked example: Research (reservation 16, limit 80) over Vision (8, weight 1) and Speech
    (8, weight 3), one 64-GPU pool, 1-GPU tasks."""
    queues = {
        "v": [waiting(f"v{i}", 1000 + i, 1) for i in range(vision_waiting)],
        "s": [waiting(f"s{i}", 2000 + i, 1) for i in range(speech_waiting)],
    }
    return snapshot(
        [pool("p", 64, ["gpu"])],
        [profile("gpu", 1, ["p"], ["Vision", "Speech"])],
        [
            fair(policy("Research", 16, 80), lending=lending),
            fair(policy("Vision", 8, 64, parent="Research"), weight=1),
            fair(policy("Speech", 8, 64, parent="Research"), weight=3),
        ],
        [cr("v", "Vision", "gpu"), cr("s", "Speech", "gpu")],
        queues,
        list(vision_running) + list(speech_running),
    )


def placed_by(d, prefix):
    return sum(1 for p in d.placements if p.task.startswith(prefix))


def test_the_split_is_in_proportion_to_the_weights_each_capped_at_what_it_can_use():
    assert fair_shares(48000, [Claim(1000, 52000), Claim(3000, 52000)]) == [12000, 36000]
    assert fair_shares(48000, [Claim(1000, 5000), Claim(3000, 52000)]) == [5000, 43000]
    assert fair_shares(10001, [Claim(1000, 30000)] * 3) == [3334, 3334, 3333]


def test_a_child_of_weight_zero_borrows_only_what_the_weighted_ones_leave():
    assert fair_shares(10000, [Claim(1000, 1000), Claim(1000, 3000), Claim(0, 10000)]) == [1000, 3000, 6000]
    assert fair_shares(10000, [Claim(1000, 20000), Claim(0, 10000)]) == [10000, 0]


def test_idle_gpus_are_lent_in_proportion_to_the_weights_under_a_fair_parent():
    d = allocate(research())
    assert (placed_by(d, "v"), placed_by(d, "s")) == (20, 44)  # 8 + 12 and 8 + 36


def test_under_a_priority_parent_the_first_in_queuing_order_borrows_first():
    d = allocate(research(lending="priority"))
    assert (placed_by(d, "v"), placed_by(d, "s")) == (56, 8)


def test_idle_gpus_never_stay_idle_for_fairness_when_a_sibling_wants_less_than_its_share():
    d = allocate(research(speech_waiting=10))
    assert (placed_by(d, "v"), placed_by(d, "s")) == (54, 10)


def test_a_child_below_its_share_takes_back_from_the_sibling_above_its_own():
    vision = [placed(f"V{i}", "v", "p", 1, i, ago_s=600 - i) for i in range(48)]
    speech = [placed(f"S{i}", "s", "p", 1, 100 + i, ago_s=300 - i) for i in range(16)]
    d = allocate(research(vision, speech, vision_waiting=0))
    stopped = [p for p in d.preemptions if p.reason == "fair_share"]
    assert len(stopped) == 28 and {p.task for p in stopped} == {f"V{i}" for i in range(20, 48)}
    assert placed_by(d, "s") == 28  # Speech: 8 borrowed + 28 = its fair 36
    verdict = next(v for v in d.verdicts() if v.task.startswith("s"))
    assert (verdict.rule, verdict.policy, verdict.borrowed, verdict.share) == (
        "fair_share",
        "Speech",
        36000,
        36000,
    )


def test_fair_reclaim_never_takes_a_sibling_below_its_reservation_nor_spares_protected_work():
    vision = [placed(f"V{i}", "v", "p", 1, i, ago_s=30) for i in range(48)]
    speech = [placed(f"S{i}", "s", "p", 1, 100 + i, ago_s=600) for i in range(16)]
    s = research(vision, speech, vision_waiting=0)
    s = replace(s, profiles=(replace(s.profiles[0], min_runtime_s=60),))
    d = allocate(s)
    assert not d.preemptions and not d.placements


def steady(s, passes):
    """Run passes on a snapshot whose work never ends: placements join the running work, preempted
    work goes back to its queue by its key."""
    for n in range(passes):
        d = allocate(s)
        if not d.placements and not d.preemptions:
            return s, d
        stopped = {p.task for p in d.preemptions}
        by_id = {t.id: (rid, t) for rid, q in s.waiting.items() for t in q}
        running = [t for t in s.placed if t.id not in stopped]
        queues = {
            rid: [t for t in q if t.id not in {p.task for p in d.placements}] for rid, q in s.waiting.items()
        }
        for t in s.placed:
            if t.id in stopped:
                queues[t.resource].append(waiting(t.id, t.seq, t.size / G))
        for rid in queues:
            queues[rid].sort(key=lambda t: t.key)
        later = NOW.replace(minute=n % 60)
        for p in d.placements:
            rid, t = by_id[p.task]
            running.append(PlacedTask(t.id, rid, p.pool, t.size, t.seq, later))
        running.sort(key=lambda t: (t.placed_at, t.seq))
        s = replace(s, waiting=queues, placed=tuple(running))
    return s, allocate(s)


@st.composite
def fair_estates(draw):
    kids = draw(st.integers(2, 4))
    size = draw(st.sampled_from([1, 2]))
    capacity = draw(st.integers(kids * 2, 24))
    names = [f"K{i}" for i in range(kids)]
    policies = [fair(policy("P", 0, capacity), lending="fair")]
    queues, running = {}, []
    for i, name in enumerate(names):
        res = draw(st.integers(0, 2))
        policies.append(fair(policy(name, res, capacity, parent="P"), weight=draw(st.integers(1, 3))))
        queues[name.lower()] = [waiting(f"{name}-w{j}", i * 100 + j, size) for j in range(capacity)]
    start = draw(st.integers(0, kids - 1))  # one child holds the pool at first
    n = capacity // size
    running = [placed(f"K{start}-r{j}", f"k{start}", "pool", size, 10_000 + j, ago_s=3600) for j in range(n)]
    return snapshot(
        [pool("pool", capacity, ["f"])],
        [profile("f", 1, ["pool"], names, size_from_task=True)],
        policies,
        [cr(name.lower(), name, "f") for name in names],
        queues,
        running,
    ), size


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fair_estates())
def test_with_steady_demand_every_child_converges_to_within_one_task_of_its_fair_share(args):
    s, size = args
    validate(s)
    s, d = steady(s, 12)
    use = {}
    for t in s.placed:
        use[t.resource] = use.get(t.resource, 0) + t.size
    run = _Pass(s)
    run.run()
    for k in run.children[run.pol_ix["P"]]:
        name = s.policies[k].id
        borrowed = max(0, use.get(name.lower(), 0) - s.policies[k].reservation)
        assert abs(borrowed - run.share[k]) <= size * G, (name, borrowed, run.share[k])


def lenders(lendable=None, a_waiting=0, b_running=0):
    """Lending limits' worked example: one 16-GPU pool; A reserves 8 and may lend `lendable` of
    them; B reserves nothing, may hold 16 and queues 16 1-GPU tasks."""
    a = replace(policy("A", 8, 16), lendable=None if lendable is None else round(lendable * G))
    return snapshot(
        [pool("p", 16, ["gpu"])],
        [profile("gpu", 1, ["p"], ["A", "B"])],
        [a, policy("B", 0, 16)],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {
            "a": [waiting(f"a{i}", i, 1) for i in range(a_waiting)],
            "b": [waiting(f"b{i}", 100 + i, 1) for i in range(16)],
        },
        [placed(f"B{i}", "b", "p", 1, 50 + i, ago_s=60) for i in range(b_running)],
    )


def test_a_lending_limit_keeps_the_rest_of_an_idle_reservation_unlent():
    assert placed_by(allocate(lenders()), "b") == 16
    assert placed_by(allocate(lenders(lendable=2)), "b") == 10  # 16 free - (8 idle - 2 lendable)
    assert placed_by(allocate(lenders(lendable=0)), "b") == 8


def test_the_kept_gpus_are_there_for_the_groups_own_arrivals_without_a_reclaim():
    d = allocate(lenders(lendable=2, a_waiting=6, b_running=10))
    assert placed_by(d, "a") == 6 and not d.preemptions
    assert placed_by(d, "b") == 0


def test_a_lending_limit_lends_more_as_the_group_uses_its_reservation():
    def with_a_running(b_running, a_running):
        s = lenders(lendable=2, b_running=b_running)
        running = s.placed + tuple(placed(f"A{i}", "a", "p", 1, i, ago_s=30) for i in range(a_running))
        return replace(s, placed=tuple(sorted(running, key=lambda t: (t.placed_at, t.seq))))

    assert placed_by(allocate(with_a_running(8, 2)), "b") == 2  # 6 free - (6 idle - 2 lendable)
    assert placed_by(allocate(with_a_running(8, 6)), "b") == 2  # 2 free, 2 idle: all lendable
    assert placed_by(allocate(with_a_running(10, 2)), "b") == 0  # B already holds 2 of A's 8


def test_fair_reclaim_hands_back_a_victim_that_turns_out_not_to_be_needed():
    # Vision runs a 4-GPU task and, newer, a 1-GPU one on a full 5-GPU pool; Speech (weight 3, share
    # 3.75 of the 5 borrowed) waits for 4 GPUs. Newest first takes the 1-GPU task, then the 4-GPU
    # one; the 4 alone make room, so only it is stopped.
    s = snapshot(
        [pool("p", 5, ["any"])],
        [profile("any", 1, ["p"], ["Vision", "Speech"], size_from_task=True)],
        [
            fair(policy("Research", 0, 16), lending="fair"),
            fair(policy("Vision", 0, 16, parent="Research"), weight=1),
            fair(policy("Speech", 0, 16, parent="Research"), weight=3),
        ],
        [cr("v", "Vision", "any"), cr("s", "Speech", "any")],
        {"s": [waiting("s1", 10, 4)]},
        [placed("A", "v", "p", 4, 1, ago_s=600), placed("B", "v", "p", 1, 2, ago_s=300)],
    )
    d = allocate(s)
    assert [(p.task, p.reason) for p in d.preemptions] == [("A", "fair_share")]
    assert [p.task for p in d.placements] == ["s1"]


class TryEveryFairReclaim(_Pass):
    """The pass with every fair reclaim tried, none refused before it takes anything."""

    def _fair_cannot(self, *args) -> bool:
        return False


def decided(cls, s):
    run = cls(s)
    run.run()
    book = VerdictBook(run)
    return run.placements, run.preemptions, [repr(v) for v in book.verdicts()]


@st.composite
def crowded_fair_estates(draw):
    """Pools filled by the children of a fair department (one child maybe a fair parent itself),
    with tasks of 1 to 4 GPUs waiting: siblings above their share on some pools and not others,
    the department sometimes at its limit, some work protected."""
    pools = [pool(f"p{i}", draw(st.integers(2, 10)), ["f"]) for i in range(draw(st.integers(1, 3)))]
    total = sum(p.capacity for p in pools) // G
    nested = draw(st.booleans())
    leaves = ["K0a", "K0b", "K1", "K2", "K3"] if nested else ["K0", "K1", "K2", "K3"]
    dept_limit = draw(st.integers(max(1, total // 2), total))
    policies = [fair(policy("D", 0, dept_limit), lending="fair")]
    for name in ("K0", "K1", "K2", "K3"):
        cap = draw(st.sampled_from([None, None, 0, 1, 3]))
        p = replace(
            policy(name, draw(st.integers(0, min(2, dept_limit))), dept_limit, parent="D"),
            max_preemptions_per_hour=cap,
        )
        policies.append(
            fair(p, weight=draw(st.integers(0, 3)), lending="fair" if nested and name == "K0" else "priority")
        )
    if nested:
        policies += [
            fair(policy(n, 0, dept_limit, parent="K0"), weight=draw(st.integers(1, 3)))
            for n in ("K0a", "K0b")
        ]
    running, used, queues = [], {}, {}
    for p in pools:
        room = p.capacity // G
        while room > 0 and sum(used.values()) < dept_limit:
            leaf = draw(st.sampled_from(leaves))
            size = min(room, draw(st.integers(1, 2)), dept_limit - sum(used.values()))
            running.append(
                placed(
                    f"r{len(running)}",
                    leaf.lower(),
                    p.id,
                    size,
                    len(running),
                    ago_s=draw(st.sampled_from([30, 600, 4000])),
                )
            )
            used[leaf] = used.get(leaf, 0) + size
            room -= size
    for i, leaf in enumerate(leaves):
        queues[leaf.lower()] = [
            waiting(f"{leaf}-w{j}", 1000 * i + j, draw(st.integers(1, 4)))
            for j in range(draw(st.integers(0, 4)))
        ]
    return snapshot(
        pools,
        [
            profile(
                "f",
                1,
                [p.id for p in pools],
                leaves,
                size_from_task=True,
                min_runtime_s=draw(st.sampled_from([0, 120])),
            )
        ],
        policies,
        [cr(leaf.lower(), leaf, "f") for leaf in leaves],
        queues,
        running,
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crowded_fair_estates())
def test_a_fair_reclaim_is_refused_untried_only_where_trying_it_would_fail(s):
    validate(s)
    assert decided(_Pass, s) == decided(TryEveryFairReclaim, s)
