"""Budget arithmetic: UTC calendar periods, usage from intervals, burn rate, run-out."""

import io
import json
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from apps.engine.core import (
    UNITS_PER_HOUR,
    UsageInterval,
    budget_used,
    burn_rate,
    charged_us,
    hours_to_units,
    period_bounds,
    projected_run_out,
)
from apps.engine.core.scenario import parse
from apps.engine.core.simulation import Simulation
from apps.engine.core.simulator import main


def utc(*args):
    return datetime(*args, tzinfo=UTC)


@pytest.mark.parametrize(
    "now, period, start, end",
    [
        (utc(2025, 3, 15, 13, 45), "day", utc(2025, 3, 15), utc(2025, 3, 16)),
        (utc(2025, 1, 5, 23, 59, 59), "week", utc(2024, 12, 30), utc(2025, 1, 6)),  # Sunday
        (utc(2025, 1, 6), "week", utc(2025, 1, 6), utc(2025, 1, 13)),  # Monday midnight
        (utc(2025, 12, 31, 23), "month", utc(2025, 12, 1), utc(2026, 1, 1)),
        (utc(2024, 2, 29, 12), "month", utc(2024, 2, 1), utc(2024, 3, 1)),
        # 01:00 in UTC+2 is still Sunday in UTC: the week is the UTC one.
        (
            datetime(2025, 1, 6, 1, tzinfo=timezone(timedelta(hours=2))),
            "week",
            utc(2024, 12, 30),
            utc(2025, 1, 6),
        ),
    ],
)
def test_periods_follow_the_utc_calendar_day_midnight_week_monday_month_first(now, period, start, end):
    assert period_bounds(now, period) == (start, end)


def test_an_unknown_period_is_refused():
    with pytest.raises(ValueError):
        period_bounds(utc(2025, 1, 1), "year")


def test_hours_convert_to_units_exactly():
    assert UNITS_PER_HOUR == 1000 * 3600 * 1_000_000
    assert hours_to_units("0.1") == hours_to_units(0.1) == hours_to_units(Decimal("0.1")) == 360_000_000_000
    assert sum(hours_to_units("0.1") for _ in range(10)) == hours_to_units(1)


def test_disabled_windows_are_not_charged_and_an_open_window_runs_to_the_end():
    start, end = utc(2025, 1, 1, 10), utc(2025, 1, 1, 11)
    assert charged_us(start, end) == 3_600_000_000
    windows = [(utc(2025, 1, 1, 10, 10), utc(2025, 1, 1, 10, 20)), (utc(2025, 1, 1, 10, 50), None)]
    assert charged_us(start, end, windows) == 40 * 60 * 1_000_000


def test_usage_is_clipped_to_the_period_weighted_and_counts_running_work_up_to_now():
    now = utc(2025, 1, 2, 1)
    intervals = [
        UsageInterval(utc(2025, 1, 1, 23), utc(2025, 1, 2, 0, 30), 1000),  # 30 min in today's period
        UsageInterval(utc(2025, 1, 2, 0, 30), None, 2000),  # running for 30 min at weight 2
        UsageInterval(utc(2025, 1, 1, 10), utc(2025, 1, 1, 12), 1000),  # yesterday
        UsageInterval(utc(2025, 1, 2, 0), utc(2025, 1, 2, 1), 0),  # exempt
    ]
    assert budget_used(intervals, now, "day") == hours_to_units("1.5")
    window = [(utc(2025, 1, 2, 0, 40), utc(2025, 1, 2, 0, 50))]
    assert budget_used(intervals, now, "day", window) == hours_to_units("1.5") - 2000 * 600_000_000


def test_burn_rate_and_projected_run_out():
    now = utc(2025, 1, 2, 12)
    intervals = [
        UsageInterval(utc(2025, 1, 2, 11), None, 2000),
        UsageInterval(utc(2025, 1, 2, 11), now, 1000),
        UsageInterval(utc(2025, 1, 2, 11, 30), None, 500),
    ]
    rate = burn_rate(intervals, now)
    assert rate == 2500  # 2.5 budget hours per hour
    assert projected_run_out(hours_to_units(10), hours_to_units(5), rate, now) == now + timedelta(hours=2)
    assert projected_run_out(hours_to_units(1), hours_to_units(1), rate, now) == now
    assert projected_run_out(hours_to_units(1), 0, 0, now) is None


@st.composite
def metered_runs(draw):
    """A one-policy scenario crossing UTC midnight, with disabled windows and preemptions."""
    events = [
        {
            "at": draw(st.integers(0, 50)),
            "submit": {
                "id": f"t{i}",
                "resource": "a",
                "duration_s": draw(st.integers(1, 60)),
                "checkpoint": draw(st.booleans()),
            },
        }
        for i in range(draw(st.integers(1, 8)))
    ]
    t = 0
    for _ in range(draw(st.integers(0, 2))):
        t = draw(st.integers(t, t + 30))
        events.append({"at": t, "engine": "disable"})
        t = draw(st.integers(t + 1, t + 30))
        events.append({"at": t, "engine": "enable"})
    return {
        "start": "2025-01-06T23:59:20Z",
        "duration_s": 120,
        "low_watermark_s": draw(st.sampled_from([0, 5])),
        "pools": [{"name": "p", "capacity": draw(st.integers(1, 3))}],
        "profiles": [
            {"name": "f", "gpus": 1, "time_weight": draw(st.sampled_from([1, 2, 0.5])), "pools": ["p"]}
        ],
        "policies": [
            {
                "name": "A",
                "reservation": 0,
                "limit": 3,
                "budget": {"hours": draw(st.sampled_from([0.005, 0.01, 1])), "period": "day"},
            }
        ],
        "compute_resources": [{"name": "a", "policy": "A", "profile": "f"}],
        "events": events,
    }


@settings(max_examples=150, deadline=None)
@given(metered_runs())
def test_the_simulator_budget_meter_equals_usage_recomputed_from_its_intervals(scenario):
    """The simulator meters incrementally; recompute from the placed/stopped intervals it printed."""
    start = utc(2025, 1, 6, 23, 59, 20)
    sim = Simulation(parse(scenario), 120_000_000)
    lines = list(sim.run())
    weight = round(Decimal(str(scenario["profiles"][0]["time_weight"])) * 1000)
    windows, since = [], None
    for e in sorted(scenario["events"], key=lambda e: e["at"]):
        if e.get("engine") == "disable" and since is None:
            since = e["at"]
        elif e.get("engine") == "enable" and since is not None:
            windows.append((start + timedelta(seconds=since), start + timedelta(seconds=e["at"])))
            since = None
    if since is not None:
        windows.append((start + timedelta(seconds=since), None))
    open_at, intervals = {}, []
    for e in lines[:-1]:
        at = start + timedelta(seconds=e["at"])
        if e["event"] == "placed":
            open_at[e["task"]] = at
        elif e["event"] in ("preempted", "canceled", "completed"):
            intervals.append(UsageInterval(open_at.pop(e["task"]), at, weight))
    intervals += [UsageInterval(s, None, weight) for s in open_at.values()]
    end = start + timedelta(seconds=120)
    total = sum(iv.weight * charged_us(iv.start, iv.end or end, windows) for iv in intervals)
    assert lines[-1]["summary"]["policies"]["A"]["budget_hours"] == round(total / UNITS_PER_HOUR, 6)
    acc = sim.accounts[0][0]
    assert acc.used(sim.enabled_clock(120_000_000)) == budget_used(intervals, end, "day", windows)


def test_summary_reports_budget_hours_at_the_time_weight(monkeypatch):
    scenario = {
        "start": "2025-01-06T00:00:00Z",
        "duration_s": 3600,
        "pools": [{"name": "p", "capacity": 1}],
        "profiles": [{"name": "premium", "gpus": 1, "time_weight": 2, "pools": ["p"]}],
        "policies": [{"name": "A", "reservation": 1, "limit": 1}],
        "compute_resources": [{"name": "a", "policy": "A", "profile": "premium"}],
        "events": [{"at": 0, "submit": {"id": "t", "resource": "a", "duration_s": 1800}}],
    }
    out = io.StringIO()
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(scenario)))
    assert main(["-", "--summary-only"], stdout=out) == 0
    summary = json.loads(out.getvalue())["summary"]
    assert summary["policies"]["A"] == {"gpu_hours": 0.5, "budget_hours": 1.0}
    assert summary["pools"]["p"]["utilization"] == 0.5
