"""The scenario library: each rule of the reference, run through the simulator, exact events.

Each `scenarios/NAME.json` says in its description what it shows; `NAME.expected.jsonl` holds
the exact output (events in time order, then the summary), checked by hand when written.
"""

import io
import json
from pathlib import Path

import pytest

from apps.engine.core.simulator import main

SCENARIOS = Path(__file__).parent / "scenarios"


def run(name: str) -> list[dict]:
    out = io.StringIO()
    assert main([str(SCENARIOS / f"{name}.json")], stdout=out) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def expected(name: str) -> list[dict]:
    return [json.loads(line) for line in (SCENARIOS / f"{name}.expected.jsonl").read_text().splitlines()]


def check(name: str) -> list[dict]:
    got = run(name)
    assert got == expected(name)
    return got


def events(lines, kind=None):
    return [(e["at"], e["task"], e["event"]) for e in lines if "event" in e and kind in (None, e["event"])]


def test_lend_then_reclaim_in_the_same_pass():
    lines = check("lend_then_reclaim")
    at3 = [e for e in lines if e.get("at") == 3]
    assert [(e["task"], e["event"], e.get("reason")) for e in at3] == [
        ("b4", "preempted", "reclaim"),
        ("b3", "preempted", "reclaim"),
        ("a1", "placed", None),
        ("a2", "placed", None),
    ]


def test_a_team_reclaims_from_its_sibling_while_their_department_is_below_its_reservation():
    lines = check("sibling_reclaim")
    assert [(e["task"], e["event"]) for e in lines if e.get("at") == 2] == [
        ("b3", "preempted"),
        ("a1", "placed"),
        ("a2", "placed"),
    ]


def test_reclaim_never_takes_the_borrower_below_its_reservation():
    lines = check("never_below_reservation")
    assert len(events(lines, "preempted")) == 2
    assert (6, "a3", "placed") in events(lines)


def test_preempted_work_requeues_in_its_old_order_and_checkpoints_resume():
    lines = check("requeue_old_order")
    placed_b = [t for _, t, _ in events(lines, "placed") if t.startswith("b")]
    assert placed_b == ["b1", "b2", "b3", "b4", "b3", "b4", "b5", "b6"]
    assert (15, "b4", "completed") in events(lines) and (18, "b3", "completed") in events(lines)


def test_first_pool_first_then_the_next():
    check("first_pool_first")


def test_execution_priority_on_a_pool():
    check("execution_priority")


def test_queuing_priority_on_a_profile():
    check("queuing_priority")


def test_fractions_of_a_gpu_add_up_exactly():
    check("fractions")


def test_size_from_task_and_a_big_task_does_not_block_smaller_ones_behind_it():
    check("size_from_task")


def test_ancestor_limits_and_reclaim_of_headroom_under_an_ancestor():
    check("ancestor_limits")


def test_budget_start_check_low_watermark_and_one_task_when_none_runs():
    check("start_check_low_watermark")


def test_budget_used_up_preempts_newest_first_and_holds_new_work():
    check("used_up")


def test_budget_resets_at_utc_midnight():
    check("reset_day")


def test_weekly_budget_resets_on_monday_and_daily_every_day():
    lines = check("reset_week")
    assert [e for e in events(lines, "placed") if e[1] == "w1"] == [
        (0, "w1", "placed"),
        (86460, "w1", "placed"),
    ]


def test_monthly_budget_resets_on_the_first():
    check("reset_month")


def test_raising_a_budget_releases_work_and_lowering_it_stops_work():
    check("budget_raise_lower")


def test_weight_zero_is_exempt_from_the_budget():
    check("weight_zero")


def test_disabled_engine_runs_no_pass_and_charges_nothing():
    check("engine_disabled")


def test_capacity_reservation_limit_changes_and_cancels():
    check("changes")


def test_a_cloud_pool_scales_up_on_demand_boots_and_releases_idle_nodes():
    lines = check("cloud_burst")
    nodes = [(e["at"], e["event"], e["node"]) for e in lines if e.get("event", "").startswith("scaled_")]
    assert nodes == [
        (10, "scaled_up", "cloud-1"),
        (20, "scaled_up", "cloud-2"),
        (100, "scaled_up", "cloud-3"),
        (290, "scaled_down", "cloud-1"),
        (300, "scaled_down", "cloud-2"),
        (330, "scaled_down", "cloud-3"),
    ]


def test_sessions_stop_at_their_idle_limits_are_not_requeued_and_the_freed_gpu_hours_are_counted():
    lines = check("session_idle_limits")
    assert [
        (e["at"], e["task"], e["event"], e.get("limit")) for e in lines if "task" in e and e["task"] != "t1"
    ] == [
        (0, "n1", "placed", None),
        (0, "v1", "placed", None),
        (0, "v2", "placed", None),
        (0, "v3", "placed", None),
        (700, "v1", "stopped", "idle"),
        (1000, "v3", "preempted", None),
        (1200, "v2", "completed", None),
        (1500, "n1", "stopped", "idle"),
        (1600, "n2", "placed", None),
        (5200, "n2", "stopped", "lifetime"),
    ]
    sessions = lines[-1]["summary"]["sessions"]
    assert sessions["freed_gpu_hours"] == round((2300 + 1000 + 800) / 3600, 6)
    assert sessions["gpu_hours"] == round((1500 + 3600 + 700 + 1200 + 1000) / 3600, 6)


def test_every_scenario_file_has_a_test():
    source = Path(__file__).read_text()
    for path in SCENARIOS.glob("*.json"):
        assert f'"{path.stem}"' in source, f"{path.name} is not checked"
        assert (SCENARIOS / f"{path.stem}.expected.jsonl").exists()


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.json")), ids=lambda p: p.stem)
def test_scenario_output_is_in_time_order_with_the_summary_last(path):
    lines = run(path.stem)
    times = [e["at"] for e in lines[:-1]]
    assert times == sorted(times)
    assert set(lines[-1]) == {"summary"}
    assert json.loads(path.read_text())["description"]


def test_several_budget_windows_each_stop_the_work_and_the_event_names_the_window():
    lines = check("budget_windows")
    stops = [(e["at"], e["window"]) for e in lines if e.get("event") == "preempted"]
    assert stops == [(36, "day"), (78, "week"), (118, "day")]
    assert [e["at"] for e in lines if e.get("event") == "placed"] == [0, 60, 100]


def test_reclaim_waits_for_the_minimum_runtime_and_stops_at_the_preemption_cap():
    lines = check("min_runtime")
    assert [(e["at"], e["task"]) for e in lines if e.get("event") == "preempted"] == [(30, "b4")]
    assert lines[-1]["summary"]["tasks"]["a2"]["state"] == "waiting"


def test_a_submit_that_can_never_fit_is_rejected_and_not_queued():
    lines = check("never_fits")
    assert [(e["at"], e["task"]) for e in lines if e.get("event") == "rejected"] == [(0, "big"), (8, "late")]
    assert all(e["reason"] == "never_fits" for e in lines if e.get("event") == "rejected")
    assert lines[-1]["summary"]["tasks"]["big"] == {"state": "rejected", "preemptions": 0, "wait_s": 0}


def test_a_team_reclaims_from_its_departments_own_work_counting_its_placement_inside_the_department():
    lines = check("ancestor_victim")
    assert [(e["task"], e["event"], e.get("reason")) for e in lines if e.get("at") == 2] == [
        ("d2", "preempted", "reclaim"),
        ("t1", "placed", None),
    ]
    assert ("d2", "placed") in [(e["task"], e["event"]) for e in lines if e.get("at") == 7]


def test_priority_a_higher_priority_task_preempts_its_own_groups_lower_priority_work_only():
    lines = check("priority_classes")
    assert [(e["at"], e["task"], e["reason"]) for e in lines if e.get("event") == "preempted"] == [
        (10, "a2", "priority"),
        (12, "a1", "priority"),
    ]
    assert [t for _, t, _ in events(lines, "placed") if t in ("mid", "a1", "a2")][-3:] == ["mid", "a1", "a2"]


def test_starvation_a_starving_head_holds_its_pool_until_it_starts():
    lines = check("starvation")
    assert (39, "big", "placed") in events(lines)
    assert not [e for e in events(lines, "placed") if 31 <= e[0] < 39]
    assert lines[-1]["summary"]["tasks"]["big"]["wait_s"] == 38


def test_a_fair_department_splits_what_its_teams_borrow_by_their_weights():
    lines = check("fair_share")
    at10 = [(e["task"], e["event"], e.get("reason")) for e in lines if e.get("at") == 10]
    assert [r for _, ev, r in at10 if ev == "preempted"] == ["reclaim"] * 2 + ["fair_share"] * 6
    assert sum(1 for t, ev, _ in at10 if ev == "placed" and t.startswith("s")) == 8


def test_a_lending_limit_keeps_part_of_an_idle_reservation_for_the_groups_own_work():
    lines = check("lendable")
    assert [e["task"] for e in lines if e.get("at") == 0] == ["b1", "b2", "b3", "b4", "b5"]
    assert [(e["task"], e["event"]) for e in lines if e.get("at") == 5] == [
        ("a1", "placed"),
        ("a2", "placed"),
        ("a3", "placed"),
    ]
    assert not [e for e in lines if e.get("event") == "preempted"]
    assert [e["task"] for e in lines if e.get("at") == 50 and e["event"] == "placed"] == ["b6", "b7", "b8"]


def test_time_limits_stop_work_at_its_running_time_limit_across_requeues():
    lines = check("time_limits")
    assert [(at, task) for at, task, _ in events(lines, "timed_out")] == [(120, "v1"), (130, "s3")]
    assert lines[-1]["summary"]["tasks"]["s3"] == {"state": "timed_out", "preemptions": 1, "wait_s": 30}
    assert lines[-1]["summary"]["ends"] == {"timed_out": 2, "dependency_failed": 0}


def test_dependencies_after_ok_cancels_down_the_chain_after_any_runs_and_a_held_task_waits():
    lines = check("dependencies")
    failed = [(e["at"], e["task"]) for e in lines if e.get("reason") == "dependency_failed"]
    assert failed == [(15, "clean"), (15, "index"), (30, "eval")]
    assert (31, "report", "placed") in events(lines) and (15, "notify", "placed") in events(lines)
    assert lines[-1]["summary"]["tasks"]["later"]["waits_for"] == ["late"]


def test_arrays_run_at_most_max_running_at_once_and_block_nothing_behind_them():
    lines = check("arrays")
    hp = [(at, task) for at, task, ev in events(lines, "placed") if task.startswith("hp")]
    assert hp == [(0, "hp[0]"), (0, "hp[1]"), (10, "hp[2]"), (10, "hp[3]"), (20, "hp[4]"), (20, "hp[5]")]
    assert (0, "solo", "placed") in events(lines) and (30, "collect", "placed") in events(lines)


def test_maintenance_window_preempts_at_its_start_and_refuses_limits_that_cross_it():
    lines = check("maintenance")
    assert (100, "u1", "preempted") in events(lines)
    assert [(e["at"], e["task"]) for e in lines if e.get("event") == "placed" and e["at"] == 200] == [
        (200, "t5"),
        (200, "u1"),
    ]


def test_loan_moves_a_reservation_and_goes_back_by_itself():
    lines = check("loans")
    assert [e["task"] for e in lines if e.get("reason") == "reclaim" and e["at"] == 110] == ["s4"]


def test_money_budget_start_check_by_pool_price_and_used_up_stop_naming_the_window():
    lines = check("money_budget")
    placed = [(e["at"], e["task"], e["pool"]) for e in lines if e.get("event") == "placed"]
    assert placed[-1] == (4800, "a5", "spare")  # 3.125 EUR needed on onprem, 2.08 left
    stops = [(e["at"], e["task"], e["window"]) for e in lines if e.get("event") == "preempted"]
    assert stops == [(5580, t, "day 10.00 EUR") for t in ("a4", "a3", "a2", "a1")]
    assert lines[-1]["summary"]["policies"]["Agents"]["spend"] == {"EUR": 10.083333}
