"""Money budgets in the pure core (issue 37 part 1): the money arithmetic, the start check at the
pool's price (low watermark at the combined rate with the new task), the stop of the newest work
that costs money when a window is used up, and time and money windows at once."""

from dataclasses import replace
from datetime import UTC, datetime
from decimal import Decimal

from engine_helpers import G, cr, placed, pool, profile, snapshot, waiting, window
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.engine.core import Budget, Policy, allocate, validate
from apps.engine.core.budget import (
    MONEY_UNITS,
    SpendInterval,
    money_label,
    money_to_units,
    money_used,
    price_to_rate,
    units_to_money,
)

EUR = "EUR"
RATES = {"onprem": price_to_rate("2.50"), "free": 0}


def money(amount, used, period="month", rates=None):
    return Budget(money_to_units(amount), period, money_to_units(used), dict(rates or RATES), EUR)


def estate(budgets, running=(), queue=(), org_budgets=(), low_watermark_s=900):
    """Team A (under org) on pools onprem (2.50 EUR a GPU-hour) then free (no price), 8 GPUs each."""
    return snapshot(
        [pool("onprem", 8, ["gpu"]), pool("free", 8, ["gpu"])],
        [profile("gpu", 1, ["onprem", "free"], ["A"], size_from_task=True)],
        [Policy("A", 0, 16 * G, "org", tuple(budgets)), Policy("org", 0, 16 * G, None, tuple(org_budgets))],
        [cr("a", "A", "gpu")],
        {"a": tuple(waiting(t, 100 + i, gpus) for i, (t, gpus) in enumerate(queue))},
        [placed(t, "a", where, 1, i, ago_s=100 - i) for i, (t, where) in enumerate(running)],
        low_watermark_s,
    )


def only_onprem(s):
    """The same estate with the profile on onprem only."""
    return replace(
        s, pools=s.pools[:1], profiles=(replace(s.profiles[0], pools=("onprem",)),), placed=s.placed
    )


def test_money_units_are_exact_micro_units_per_gpu_hour():
    assert MONEY_UNITS == 1000 * 1_000_000 * 3_600_000_000
    assert price_to_rate("2.50") == 2_500_000 and price_to_rate(Decimal("0.0125")) == 12_500
    assert money_to_units("500") == 500 * MONEY_UNITS
    assert units_to_money(money_to_units("498.37")) == Decimal("498.37")
    assert sum(money_to_units("0.1") for _ in range(10)) == money_to_units(1)
    assert money_label("month", money_to_units("500"), EUR) == "month 500.00 EUR"


def test_money_used_is_size_times_price_clipped_to_the_period_and_a_pool_without_price_is_free():
    now = datetime(2025, 1, 2, 1, tzinfo=UTC)
    intervals = [
        SpendInterval(
            datetime(2025, 1, 1, 23, tzinfo=UTC), datetime(2025, 1, 2, 0, 30, tzinfo=UTC), 2000, "onprem"
        ),
        SpendInterval(datetime(2025, 1, 2, 0, 30, tzinfo=UTC), None, 500, "onprem"),  # running 30 min
        SpendInterval(datetime(2025, 1, 2, 0, tzinfo=UTC), None, 8000, "free"),
    ]
    # 2 GPUs x 0.5 h x 2.50 + 0.5 GPU x 0.5 h x 2.50 = 2.50 + 0.625 EUR today.
    assert units_to_money(money_used(intervals, now, "day", RATES)) == Decimal("3.125")


def test_money_start_check_needs_the_money_left_to_last_the_low_watermark_at_the_combined_rate():
    # Two 1-GPU tasks on onprem burn 5.00 EUR/h; a third needs 0.25 h x 7.50 = 1.875 EUR.
    d = allocate(
        only_onprem(estate([money(500, "498.50")], [("r0", "onprem"), ("r1", "onprem")], [("w0", 1)]))
    )
    v = d.verdict("w0")
    assert [p.task for p in d.placements] == []
    assert (v.rule, v.policy, v.cause) == ("budget_start_check", "A", "month 500.00 EUR")
    assert (units_to_money(v.budget_left), units_to_money(v.budget_needed)) == (
        Decimal("1.5"),
        Decimal("1.875"),
    )
    d = allocate(
        only_onprem(estate([money(500, "498.125")], [("r0", "onprem"), ("r1", "onprem")], [("w0", 1)]))
    )
    assert [p.task for p in d.placements] == ["w0"]  # 1.875 left: exactly enough


def test_money_start_check_depends_on_the_task_size_a_smaller_task_may_start():
    # 1.60 EUR left at 5.00 EUR/h: up to (1.60 - 1.25) / (0.25 h x 2.50) = 0.56 GPU may start.
    s = only_onprem(
        estate([money(500, "498.40")], [("r0", "onprem"), ("r1", "onprem")], [("w0", 1), ("w1", 0.5)])
    )
    d = allocate(s)
    assert [p.task for p in d.placements] == ["w1"]
    # Now at 6.25 EUR/h: the 1-GPU task needs 0.25 h x 8.75 = 2.1875 EUR.
    assert units_to_money(d.verdict("w0").budget_needed) == Decimal("2.1875")


def test_money_start_check_lets_one_task_start_when_none_of_the_counted_work_runs():
    d = allocate(only_onprem(estate([money(500, "499.99")], [], [("w0", 4), ("w1", 1)])))
    assert [p.task for p in d.placements] == ["w0"]
    assert d.verdict("w1").rule == "budget_start_check"


def test_money_used_up_stops_the_newest_paid_work_and_spares_work_on_a_pool_without_price():
    running = [("r0", "onprem"), ("r1", "free"), ("r2", "onprem")]
    d = allocate(estate([money(500, 500)], running))
    assert [(p.task, p.reason, p.window) for p in d.preemptions] == [
        ("r2", "budget", "month 500.00 EUR"),
        ("r0", "budget", "month 500.00 EUR"),
    ]
    # New work goes to the pool that costs nothing.
    d = allocate(estate([money(500, 500)], [("r1", "free")], [("w0", 1)]))
    assert (d.preemptions, [(p.task, p.pool) for p in d.placements]) == ((), [("w0", "free")])


def test_money_used_up_gives_budget_used_up_naming_the_window_until_its_reset():
    d = allocate(only_onprem(estate([money(500, "500.01")], [("r0", "onprem")], [("w0", 1)])))
    v = d.verdict("w0")
    assert [p.task for p in d.preemptions] == ["r0"]
    assert (v.rule, v.policy, v.cause, v.reset_at) == (
        "budget_used_up",
        "A",
        "month 500.00 EUR",
        datetime(2025, 2, 1, tzinfo=UTC),
    )
    assert units_to_money(v.budget_left) == Decimal("-0.01")


def test_money_window_of_an_ancestor_checks_the_subtree_rate():
    # org has 300 EUR a week with 1.50 left; A's two tasks burn 5.00 EUR/h: a third needs 1.875.
    s = only_onprem(
        estate(
            [], [("r0", "onprem"), ("r1", "onprem")], [("w0", 1)], org_budgets=[money(300, "298.50", "week")]
        )
    )
    v = allocate(s).verdict("w0")
    assert (v.rule, v.policy, v.cause) == ("budget_start_check", "org", "week 300.00 EUR")


def test_time_and_money_windows_at_once_both_enforced_and_the_binding_one_named():
    running = [("r0", "onprem")]
    # Money used up, time fine: the money window stops the paid work and is named.
    d = allocate(only_onprem(estate([window(10, 2), money(500, 500)], running, [("w0", 1)])))
    assert [(p.task, p.window) for p in d.preemptions] == [("r0", "month 500.00 EUR")]
    assert d.verdict("w0").cause == "month 500.00 EUR"
    # Time used up, money fine: the time window (day) stops it, on any pool.
    d = allocate(estate([window(10, 10), money(500, 0)], [("r0", "free")], [("w0", 1)]))
    assert [(p.task, p.window) for p in d.preemptions] == [("r0", "day")]
    assert (d.verdict("w0").rule, d.verdict("w0").cause) == ("budget_used_up", "day")


def test_money_windows_validate_one_per_period_beside_a_time_window_of_the_same_period():
    validate(estate([window(10, 0, "month"), money(500, 0)]))
    bad = estate([money(500, 0), money(100, 0)])
    try:
        validate(bad)
    except ValueError as error:
        assert "money budget periods" in str(error)
    else:
        raise AssertionError("two money windows of one period pass")


@st.composite
def money_estates(draw):
    n_on = draw(st.integers(0, 4))
    n_free = draw(st.integers(0, 3))
    running = [(f"r{i}", "onprem") for i in range(n_on)] + [(f"f{i}", "free") for i in range(n_free)]
    running = draw(st.permutations(running))
    queue = [(f"w{i}", draw(st.sampled_from([0.25, 0.5, 1, 2]))) for i in range(draw(st.integers(0, 5)))]
    price = draw(st.sampled_from(["0", "0.40", "2.50", "7.25"]))
    budget = money(draw(st.sampled_from([5, 20, 100])), 0, rates={"onprem": price_to_rate(price), "free": 0})
    used = draw(st.integers(0, budget.limit * 11 // 10))
    on_only = draw(st.booleans())
    s = estate(
        [replace(budget, used=used)], running, queue, low_watermark_s=draw(st.sampled_from([0, 900, 3600]))
    )
    return only_onprem(s) if on_only and not n_free else s


@settings(max_examples=300, deadline=None)
@given(money_estates())
def test_property_money_start_check_keeps_projected_spend_within_the_window_free_work_never_stopped(
    s,
):
    d = allocate(s)
    b = s.policies[0].budgets[0]
    rate = b.rates["onprem"]
    left = b.limit - b.used
    sizes = {t.id: t.size for q in s.waiting.values() for t in q} | {t.id: t.size for t in s.placed}
    stopped = {p.task for p in d.preemptions}
    on = [p.task for p in d.placements if p.pool == "onprem"]
    assert all(p.pool == "onprem" and rate for p in d.preemptions)  # a pool without price: never stopped
    running = [t.id for t in s.placed if t.pool == "onprem" and t.id not in stopped] + on
    combined = sum(sizes[t] for t in running) * rate
    if left <= 0:
        assert not (rate and on)
        assert not (rate and any(t.pool == "onprem" and t.id not in stopped for t in s.placed))
    elif rate and on and len(running) > 1:
        assert left >= s.low_watermark_s * 1_000_000 * combined  # projected spend at the low watermark


def test_fair_lending_with_time_and_money_windows_a_used_up_money_window_claims_nothing_more():
    # org lends fairly to A and B (0 reserved each). A's money window is used up: A claims only
    # what it holds (nothing), so B's waiting work takes the free GPUs; a time window with hours
    # left on B changes nothing.
    s = snapshot(
        [pool("onprem", 4, ["gpu"])],
        [profile("gpu", 1, ["onprem"], ["A", "B"])],
        [
            Policy("org", 0, 4 * G, None, (), lending="fair"),
            Policy("A", 0, 4 * G, "org", (money(500, 500),)),
            Policy("B", 0, 4 * G, "org", (window(10, 0),)),
        ],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {
            "a": tuple(waiting(f"a{i}", 100 + i, 1) for i in range(4)),
            "b": tuple(waiting(f"b{i}", 200 + i, 1) for i in range(4)),
        },
    )
    d = allocate(s)
    assert sorted(p.task for p in d.placements) == ["b0", "b1", "b2", "b3"]
    assert (d.verdict("a0").rule, d.verdict("a0").cause) == ("budget_used_up", "month 500.00 EUR")


def test_fair_lending_with_time_windows_only_builds_no_money_state():
    s = snapshot(
        [pool("onprem", 4, ["gpu"])],
        [profile("gpu", 1, ["onprem"], ["A", "B"])],
        [
            Policy("org", 0, 4 * G, None, (), lending="fair"),
            Policy("A", 0, 4 * G, "org", (window(10, 0),)),
            Policy("B", 0, 4 * G, "org", (window(10, 0),)),
        ],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {
            "a": (waiting("a0", 100, 1), waiting("a1", 101, 1)),
            "b": (waiting("b0", 200, 1), waiting("b1", 201, 1)),
        },
    )
    assert sorted(p.task for p in allocate(s).placements) == ["a0", "a1", "b0", "b1"]
