"""The quota advisor's rule (apps/whatif/advisor_core.py), exact: the worked example of
docs/whatif.md ("Quota advisor") and each goal and envelope on its own."""

from decimal import Decimal

from apps.whatif.advisor_core import (
    US_PER_HOUR,
    Figures,
    Goals,
    budget_peak,
    changes,
    fit,
    measure_use,
    propose,
    wish,
)

H = US_PER_HOUR
T = 10 * H  # a recorded period of 10 hours

# vision: 2 GPUs all 10 hours and 2 more in the first hour; nlp: 1 GPU for the first 5 hours.
VISION = [(0, None, 2000), (0, H, 2000)]
NLP = [(0, 5 * H, 1000)]


def example(capacity_milli=8000) -> tuple[list[Figures], dict]:
    figures = [
        Figures(
            "research",
            "org",
            4000,
            8000,
            measure_use(VISION + NLP, T, 4000),
            budget_hours=Decimal(60),
            budget_period="day",
            budget_peak_hours=Decimal(27),
        ),
        Figures(
            "vision",
            "research",
            0,
            4000,
            measure_use(VISION, T, 0),
            start_p95_s=300,
            budget_hours=Decimal(30),
            budget_period="day",
            budget_peak_hours=Decimal(22),
        ),
        Figures(
            "nlp",
            "research",
            2000,
            4000,
            measure_use(NLP, T, 2000),
            start_p95_s=60,
            reserved_start_p95_s=30,
            budget_hours=Decimal(10),
            budget_period="day",
            budget_peak_hours=Decimal(5),
        ),
    ]
    return figures, propose(figures, capacity_milli)


def test_measure_use_levels_borrowed_and_idle_hours_are_exact():
    use = measure_use(VISION + NLP + [(-H, -1, 5000), (T, None, 5000)], T, 4000)
    assert use.levels == ((2000, 5 * H), (3000, 4 * H), (5000, H))
    assert (use.peak_milli, use.active_us, use.largest_milli) == (5000, T, 2000)
    # 27 GPU-hours in use; borrowed above 4 reserved: 1 GPU for 1 hour; idle: 2 x 5 h + 1 x 4 h.
    assert (use.gpu_units, use.borrowed_units, use.idle_units) == (27 * H * 1000, H * 1000, 14 * H * 1000)
    assert use.percentile_active(95) == 5000 and use.percentile_active(90) == 3000


def test_budget_peak_is_the_busiest_whole_period_in_budget_hours():
    # 2 GPUs at weight 1.5 from hour 20 to 30: 2 x 1.5 x 4 = 12 budget hours on day one (+ 2 of the
    # other run = 14), 2 x 1.5 x 6 = 18 on day two
    intervals = [(20 * H, 30 * H, 2000, 1500), (0, 2 * H, 1000, 1000)]
    assert budget_peak(intervals, [(0, 24 * H), (24 * H, 48 * H)]) == Decimal("18.000000")
    assert budget_peak(intervals, []) is None


def test_worked_example_guarantee_idle_limit_budget_and_envelope():
    figures, proposed = example()
    research, vision, nlp = (proposed[n] for n in ("research", "vision", "nlp"))
    # vision waited 300 s > 120 s at p95: its peak (4) is reserved; limit 4 x 1.25 = 5
    assert (vision.reservation_milli, vision.limit_milli, vision.budget_hours) == (4000, 5000, 27)
    # nlp: 1 GPU half the time: 1 reserved would idle 50 % > 20 %: 0; limit 1 x 1.25 -> 2, kept at 4
    assert (nlp.reservation_milli, nlp.limit_milli, nlp.budget_hours) == (0, 4000, 6)
    # research: its own cover is 3 (idle 5 of 30 GPU-hours), its children need 4; limit 5 x 1.25 -> 7,
    # kept at 8
    assert (research.reservation_milli, research.limit_milli, research.budget_hours) == (4000, 8000, 33)
    assert changes(figures, proposed) == {
        "reservations": {"vision": 4, "nlp": 0},
        "limits": {"vision": 5},
        "budgets": {
            "research": {"hours": 33, "period": "day"},
            "vision": {"hours": 27, "period": "day"},
            "nlp": {"hours": 6, "period": "day"},
        },
    }


def test_envelope_children_reservations_never_exceed_the_parents():
    figures, proposed = example(capacity_milli=3000)
    assert proposed["research"].reservation_milli == 3000 and proposed["research"].limit_milli == 3000
    assert proposed["vision"].reservation_milli == 3000 and proposed["vision"].limit_milli == 3000
    assert "cut to fit the parent's envelope" in proposed["vision"].reasons
    assert sum(proposed[n].reservation_milli for n in ("vision", "nlp")) <= 3000


def test_fit_cuts_in_proportion_with_the_remainders_by_size_then_name():
    assert fit({"a": 3000, "b": 1000, "c": 1000}, 4000, 1000) == {"a": 2000, "b": 1000, "c": 1000}
    assert fit({"a": 1000}, 4000, 1000) == {"a": 1000}


def test_idle_goal_reserves_the_largest_level_idle_at_most_20_percent():
    use = measure_use(VISION, T, 0)  # 4 GPUs 1 h, 2 GPUs 9 h: 3 reserved idle 9 of 30 GPU-hours
    assert wish(Figures("v", None, 0, 8000, use)).reservation_milli == 2000
    lenient = Goals(idle_reserved_max_pct=30)
    assert wish(Figures("v", None, 0, 8000, use), lenient).reservation_milli == 3000


def test_guarantee_goal_never_lowers_a_reservation_whose_reserved_work_missed_it():
    use = measure_use(NLP, T, 3000)
    missed = Figures("n", None, 3000, 4000, use, reserved_start_p95_s=600)
    assert wish(missed).reservation_milli == 3000
    assert wish(Figures("n", None, 3000, 4000, use, reserved_start_p95_s=60)).reservation_milli == 0


def test_limit_goal_lowers_a_limit_only_when_asked():
    use = measure_use(NLP, T, 0)
    assert wish(Figures("n", None, 0, 8000, use)).limit_milli == 8000
    assert wish(Figures("n", None, 0, 8000, use), Goals(lower_limits=True)).limit_milli == 2000


def test_limit_goal_is_at_least_the_peak_in_use_and_the_largest_profile():
    # 1 GPU for an hour, 4 more for its first minute: p95 1 x 1.25 -> 2, but the peak was 5
    use = measure_use([(0, H, 1000), (0, 60_000_000, 4000)], T, 0)
    assert wish(Figures("n", None, 0, 1000, use)).limit_milli == 5000
    assert wish(Figures("n", None, 0, 1000, use, min_limit_milli=6000)).limit_milli == 6000


def test_a_group_with_no_use_and_no_wait_keeps_its_figures():
    p = wish(Figures("idle", None, 2000, 4000, measure_use([], T, 2000), budget_hours=Decimal(5)))
    assert (p.reservation_milli, p.limit_milli, p.budget_hours, p.reasons) == (
        2000,
        4000,
        None,
        ("no use: kept",),
    )
