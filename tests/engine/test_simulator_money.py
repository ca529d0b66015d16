"""The simulator with money budgets (issue 37 part 1): prices per GPU-hour in the scenario, money
windows beside time windows, their stops and start checks on the virtual clock, spend per policy in
the summary, and the scenario's field errors."""

import pytest

from apps.engine.core.scenario import parse
from apps.engine.core.scenario_model import ScenarioError
from apps.engine.core.simulation import Simulation

H = 3600


def scenario(windows, events, prices=None, duration_s=4 * H, capacity=8):
    return {
        "start": "2025-01-06T00:00:00Z",
        "duration_s": duration_s,
        "pass_interval_s": 60,
        "pools": [{"name": "onprem", "capacity": capacity}, {"name": "spare", "capacity": 8}],
        "profiles": [{"name": "gpu", "gpus": 1, "pools": ["onprem", "spare"]}],
        "policies": [
            {"name": "org", "reservation": 0, "limit": 16},
            {"name": "Agents", "parent": "org", "reservation": 0, "limit": 16, "budgets": windows},
        ],
        "compute_resources": [{"name": "agents", "policy": "Agents", "profile": "gpu"}],
        "prices": prices if prices is not None else {"EUR": {"onprem": "2.50"}},
        "events": events,
    }


def submit(at, id, duration_s=10 * H):
    return {"at": at, "submit": {"id": id, "resource": "agents", "duration_s": duration_s}}


def run(sc):
    lines = list(Simulation(parse(sc), sc["duration_s"] * 1_000_000).run())
    return lines[:-1], lines[-1]["summary"]


def test_money_window_used_up_stops_the_paid_work_and_the_summary_reports_the_spend():
    # Two 1-GPU tasks on onprem at 2.50 EUR/GPU-h burn 5.00 EUR/h: 10 EUR a day lasts 2 h, then both
    # stop (reason budget, the window named); a third submitted later starts on spare (no price).
    sc = scenario([{"amount": "10", "currency": "EUR", "period": "day"}], [submit(0, "a"), submit(0, "b")])
    sc["execution_order"] = {}
    lines, summary = run(sc)
    stops = [(e["at"], e["task"], e["reason"], e.get("window")) for e in lines if e["event"] == "preempted"]
    assert stops == [(2 * H, "b", "budget", "day 10.00 EUR"), (2 * H, "a", "budget", "day 10.00 EUR")]
    assert summary["policies"]["Agents"]["spend"] == {"EUR": 10.0}
    assert summary["policies"]["org"]["spend"] == {"EUR": 10.0}  # the subtree's spend


@pytest.mark.parametrize("amount, c_starts", [("5", False), ("6", True)])
def test_money_start_check_in_the_simulator_needs_the_money_left_to_last_the_low_watermark(amount, c_starts):
    # Only onprem (2.50 EUR/GPU-h). a starts at 0 (nothing runs); at 1 h, 2.50 spent, b needs
    # 0.25 h x 5.00 = 1.25 EUR: it starts. At 1 h 12 min 3.50 EUR are spent (2.50 + 0.2 h x 5.00):
    # c needs 0.25 h x 7.50 = 1.875 EUR; 5 EUR a day leaves 1.50 (refused), 6 EUR leaves 2.50.
    sc = scenario(
        [{"amount": amount, "currency": "EUR", "period": "day"}],
        [submit(0, "a"), submit(H, "b"), submit(4320, "c")],
        duration_s=4380,
    )
    sc["pools"][1]["capacity"] = 0
    lines, summary = run(sc)
    placed = [(e["at"], e["task"]) for e in lines if e["event"] == "placed"]
    assert placed == [(0, "a"), (H, "b")] + ([(4320, "c")] if c_starts else [])
    # 2.50 EUR/GPU-h x (4380 + 780 [+ 60]) s.
    expected = 2.5 * (4380 + 780 + (60 if c_starts else 0)) / H
    assert summary["policies"]["Agents"]["spend"] == {"EUR": round(expected, 6)}


def test_time_and_money_windows_at_once_in_the_simulator_each_enforced():
    sc = scenario(
        [{"hours": 1, "period": "day"}, {"amount": "100", "currency": "EUR", "period": "month"}],
        [submit(0, "a")],
    )
    lines, summary = run(sc)
    stops = [(e["at"], e["task"], e.get("window")) for e in lines if e["event"] == "preempted"]
    assert stops == [(H, "a", "day")]  # the time window binds first: 1 h at weight 1
    assert summary["policies"]["Agents"]["spend"] == {"EUR": 2.5}


@pytest.mark.parametrize(
    "windows, prices, error",
    [
        (
            [{"amount": "10", "currency": "USD", "period": "day"}],
            None,
            "policies[1].budgets: a money window in USD needs prices.USD",
        ),
        ([{"amount": "ten", "currency": "EUR", "period": "day"}], None, "policies[1].budgets[0].amount"),
        ([{"amount": "10", "currency": "eur", "period": "day"}], None, "policies[1].budgets[0].currency"),
        ([{"amount": "10", "currency": "EUR", "period": "year"}], None, "policies[1].budgets[0].period"),
        (
            [
                {"amount": "10", "currency": "EUR", "period": "day"},
                {"amount": "20", "currency": "EUR", "period": "day"},
            ],
            None,
            "policies[1].budgets[1].period: a policy has one money window per period",
        ),
        ([], {"EUR": {"nowhere": "1"}}, "prices.EUR.nowhere: unknown pool"),
        ([], {"EUR": {"onprem": "-1"}}, "prices.EUR.onprem: must be >= 0"),
        ([], {"EUR": {"onprem": "0.0000001"}}, "prices.EUR.onprem: a price is held to 0.000001"),
        ([], {"euro": {"onprem": "1"}}, "prices.euro: must be a three-letter"),
    ],
)
def test_scenario_money_fields_are_checked_with_the_field_named(windows, prices, error):
    with pytest.raises(ScenarioError) as e:
        parse(scenario(windows, [], prices))
    assert str(e.value).startswith(error)


def test_a_time_window_and_a_money_window_of_the_same_period_are_both_allowed():
    sc = parse(
        scenario([{"hours": 5, "period": "day"}, {"amount": "10", "currency": "EUR", "period": "day"}], [])
    )
    assert [len(p.budgets) + len(p.money) for p in sc.policies] == [0, 2]
