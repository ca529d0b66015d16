"""The what-if comparison (docs/whatif.md, "Comparison"): exact figures on small estates."""

import copy
import json

import pytest

from apps.engine.core.whatif import compare, to_csv_rows
from apps.engine.core.whatif_changes import WhatIfError, apply_changes


def estate(capacity=4, a=None, b=None, duration_s=1000, step_s=1, pools=None, events=()):
    """Pool `onprem`, profile `gpu` (1 GPU), groups A and B (no reservation, limit 4)."""
    return {
        "start": "2025-01-06T00:00:00Z",
        "duration_s": duration_s,
        "pass_interval_s": step_s,
        "pools": pools or [{"name": "onprem", "capacity": capacity}],
        "profiles": [{"name": "gpu", "gpus": 1, "pools": [p["name"] for p in pools or [{"name": "onprem"}]]}],
        "policies": [
            {"name": "A", "reservation": 0, "limit": 4} | (a or {}),
            {"name": "B", "reservation": 0, "limit": 4} | (b or {}),
        ],
        "compute_resources": [
            {"name": "a", "policy": "A", "profile": "gpu"},
            {"name": "b", "policy": "B", "profile": "gpu"},
        ],
        "events": list(events),
    }


def submits(prefix, resource, n, at=0, duration_s=100):
    return [
        {"at": at, "submit": {"id": f"{prefix}{i}", "resource": resource, "duration_s": duration_s}}
        for i in range(n)
    ]


def borrowing():
    """A fills the 4-GPU pool at 0 with 4 tasks of 100 s; B submits 2 tasks of 50 s at 10 s."""
    return estate(events=submits("a", "a", 4) + submits("b", "b", 2, at=10, duration_s=50))


def test_a_reservation_lets_the_group_reclaim_what_was_lent_so_its_tasks_wait_zero():
    """Reclaim (docs/engine.md section 3): without a reservation B waits for A's tasks to end
    (100 - 10 = 90 s); with 2 GPUs reserved it reclaims 2 of A's borrowed GPUs at 10 s, and the
    2 preempted tasks of A restart from zero when B's end, at 60 s (waits 0, 0, 50, 50)."""
    report = compare(borrowing(), {"reservations": {"B": 2}}, wait_threshold_s=60)
    base, changed, diff = (
        report["base"]["groups"],
        report["changed"]["groups"],
        report["difference"]["groups"],
    )
    assert (base["B"]["wait_median_s"], base["B"]["wait_p95_s"]) == (90, 90)
    assert (changed["B"]["wait_median_s"], changed["B"]["wait_p95_s"]) == (0, 0)
    assert (diff["B"]["wait_median_s"], diff["B"]["wait_p95_s"]) == (-90, -90)
    assert (base["A"]["wait_median_s"], base["A"]["wait_p95_s"]) == (0, 0)
    assert (changed["A"]["wait_median_s"], changed["A"]["wait_p95_s"]) == (25, 50)
    assert base["B"]["waited_past_threshold"] == 2 and changed["B"]["waited_past_threshold"] == 0
    assert changed["A"]["preemptions"] == {"budget": 0, "reclaim": 2}
    assert report["changed"]["preemptions"] == {"budget": 0, "reclaim": 2}
    assert report["difference"]["preemptions"] == {"budget": 0, "reclaim": 2}
    # A's GPU-hours: 4 x 100 s, plus the 2 x 10 s lost to the reclaim = 420 GPU-s.
    assert base["A"]["gpu_hours"] == 0.111111 and changed["A"]["gpu_hours"] == 0.116667
    assert report["base"]["pools"]["onprem"] == {"utilization": 0.125, "gpu_hours": 0.138889}
    assert report["changed"]["pools"]["onprem"] == {"utilization": 0.13, "gpu_hours": 0.144444}
    assert report["base"]["tasks"] == report["changed"]["tasks"] == {"completed": 6}
    assert report["changes"] == {"reservations": {"B": 2}}
    assert report["wait_threshold_s"] == 60


def test_halving_a_budget_preempts_the_work_when_it_is_used_up_with_the_exact_budget_hours():
    """Time budgets (docs/engine.md section 5): 2 tasks at weight 1 use 2 budget hours in their
    hour; with 1 hour a day they are stopped at 1800 s (2 x 1800 s = 1 h) and wait to the end."""
    scenario = estate(
        a={"budget": {"hours": 2, "period": "day"}},
        duration_s=7200,
        events=submits("a", "a", 2, duration_s=3600),
    )
    report = compare(scenario, {"budgets": {"A": {"hours": 1, "period": "day"}}})
    base, changed = report["base"]["groups"]["A"], report["changed"]["groups"]["A"]
    assert (base["budget_hours"], base["gpu_hours"], base["preemptions"]) == (
        2,
        2,
        {"budget": 0, "reclaim": 0},
    )
    assert (changed["budget_hours"], changed["gpu_hours"]) == (1, 1)
    assert changed["preemptions"] == {"budget": 2, "reclaim": 0}
    assert (changed["wait_median_s"], changed["wait_p95_s"]) == (5400, 5400)
    assert report["changed"]["tasks"] == {"waiting": 2}
    assert base["budget_overshoot_hours"] == changed["budget_overshoot_hours"] == {"day": 0}
    assert report["difference"]["groups"]["A"]["budget_hours"] == -1


def test_a_money_window_in_the_changes_stops_the_priced_work_when_used_up():
    """Money budgets (docs/engine.md section 5b): 2 tasks of 1 GPU at 2.50 EUR a GPU-hour burn
    5.00 EUR an hour; 2.50 EUR a day is used up at 1800 s, when both are stopped; a time window of the
    same period may stand beside it."""
    scenario = estate(duration_s=7200, events=submits("a", "a", 2, duration_s=3600))
    scenario["prices"] = {"EUR": {"onprem": "2.50"}}
    windows = [{"hours": 10, "period": "day"}, {"amount": 2.5, "currency": "EUR", "period": "day"}]
    report = compare(scenario, {"budgets": {"A": windows}})
    assert report["base"]["groups"]["A"]["gpu_hours"] == 2
    changed = report["changed"]["groups"]["A"]
    assert (changed["gpu_hours"], changed["preemptions"]) == (1, {"budget": 2, "reclaim": 0})
    assert report["changes"] == {"budgets": {"A": windows}}


def test_budget_overshoot_is_the_use_past_the_limit_until_the_pass_that_stops_the_work():
    """Passes every 600 s: 0.75 h runs out at 1350 s, the pass at 1800 s stops both tasks, so the
    day's window is charged 1 h, 0.25 h past its limit."""
    scenario = estate(
        a={"budget": {"hours": 2, "period": "day"}},
        duration_s=7200,
        step_s=600,
        events=submits("a", "a", 2, duration_s=3600),
    )
    report = compare(scenario, {"budgets": {"A": [{"hours": 0.75, "period": "day"}]}})
    assert report["changed"]["groups"]["A"]["budget_hours"] == 1
    assert report["changed"]["groups"]["A"]["budget_overshoot_hours"] == {"day": 0.25}
    assert report["base"]["groups"]["A"]["budget_overshoot_hours"] == {"day": 0}
    assert report["difference"]["groups"]["A"]["budget_overshoot_hours"] == {"day": 0.25}
    assert report["base"]["groups"]["B"]["budget_overshoot_hours"] == {}


def test_more_capacity_removes_the_waits():
    """4 tasks of 100 s on 2 GPUs: two wait 100 s (median 50, p95 100); on 4 GPUs none waits."""
    report = compare(estate(capacity=2, events=submits("a", "a", 4)), {"capacities": {"onprem": 4}})
    base, changed = report["base"]["groups"]["A"], report["changed"]["groups"]["A"]
    assert (base["wait_median_s"], base["wait_p95_s"]) == (50, 100)
    assert (changed["wait_median_s"], changed["wait_p95_s"]) == (0, 0)
    # 400 GPU-s over 2 x 1000 GPU-s declared, then over 4 x 1000.
    assert report["base"]["pools"]["onprem"]["utilization"] == 0.2
    assert report["changed"]["pools"]["onprem"]["utilization"] == 0.1


def test_the_pool_order_moves_the_gpu_hours_to_the_pool_now_first():
    pools = [{"name": "hpc", "capacity": 4}, {"name": "burst", "capacity": 4}]
    report = compare(
        estate(pools=pools, events=submits("a", "a", 2)), {"pool_order": {"gpu": ["burst", "hpc"]}}
    )
    assert report["base"]["pools"]["hpc"]["gpu_hours"] == 0.055556
    assert report["base"]["pools"]["burst"]["gpu_hours"] == 0
    assert report["changed"]["pools"]["hpc"]["gpu_hours"] == 0
    assert report["changed"]["pools"]["burst"]["gpu_hours"] == 0.055556
    assert report["difference"]["pools"]["burst"]["gpu_hours"] == 0.055556


def test_a_time_weight_changes_the_budget_hours_not_the_gpu_hours():
    report = compare(
        estate(duration_s=7200, events=submits("a", "a", 2, duration_s=1800)), {"time_weights": {"gpu": 0.5}}
    )
    assert report["base"]["groups"]["A"]["budget_hours"] == 1
    assert report["changed"]["groups"]["A"]["budget_hours"] == 0.5
    assert report["changed"]["groups"]["A"]["gpu_hours"] == 1


def test_the_changes_replace_the_set_events_of_the_changed_fields_and_leave_the_input_alone():
    scenario = estate(
        events=[
            *submits("a", "a", 1),
            {"at": 5, "set_reservation": {"policy": "B", "reservation": 1}},
            {"at": 6, "set_limit": {"policy": "B", "limit": 3}},
            {"at": 7, "set_capacity": {"pool": "onprem", "capacity": 3}},
        ]
    )
    before = copy.deepcopy(scenario)
    out = apply_changes(scenario, {"reservations": {"B": 2}, "capacities": {"onprem": 8}})
    assert scenario == before
    assert [next(k for k in e if k != "at") for e in out["events"]] == ["submit", "set_limit"]
    assert out["policies"][1]["reservation"] == 2 and out["pools"][0]["capacity"] == 8
    compare(scenario, {"limits": {"A": 2}, "budgets": {"B": {"hours": 1, "period": "week"}}})
    assert scenario == before


BAD = [
    ([], "changes: must be an object"),
    ({"capacity": {}}, "changes.capacity: unknown field"),
    ({"reservations": []}, "changes.reservations: must be an object"),
    ({"reservations": {"vision": 2}}, "changes.reservations.vision: unknown policy"),
    ({"reservations": {"A": 5}}, "changes.reservations.A: 5 GPUs is above the limit of 4 GPUs"),
    ({"limits": {"A": -1}}, "changes.limits.A: must be >= 0, got -1"),
    ({"limits": {"A": True}}, "changes.limits.A: must be a number"),
    (
        {"limits": {"A": 0.5}},
        "changes.limits.A: the changed scenario is refused: compute_resources[0].profile",
    ),
    (
        {"reservations": {"B": 3}, "limits": {"B": 2}},
        "changes.limits.B: 2 GPUs is below the reservation of 3 GPUs",
    ),
    (
        {"budgets": {"A": {"hours": 1, "period": "year"}}},
        "changes.budgets.A.period: must be one of day, week, month",
    ),
    ({"budgets": {"A": {"hours": 1}}}, "changes.budgets.A.period: required"),
    (
        {"budgets": {"A": [{"hours": 1, "period": "day"}, {"hours": 2, "period": "day"}]}},
        "changes.budgets.A[1].period: a policy has one time window per period",
    ),
    ({"budgets": {"A": 3}}, "changes.budgets.A: must be an object {hours, period} or a list of them"),
    (
        {"budgets": {"A": {"amount": 5, "currency": "eur", "period": "day"}}},
        "changes.budgets.A.currency: must be a three-letter ISO 4217 code in capitals",
    ),
    ({"budgets": {"A": {"amount": 5, "period": "day"}}}, "changes.budgets.A.currency: required"),
    (
        {"budgets": {"A": {"amount": 5, "hours": 1, "currency": "EUR", "period": "day"}}},
        "changes.budgets.A.hours: unknown field",
    ),
    (
        {"budgets": {"A": [{"amount": 1, "currency": "EUR", "period": "day"}] * 2}},
        "changes.budgets.A[1].period: a policy has one money window per period",
    ),
    (
        {"budgets": {"A": {"amount": 5, "currency": "USD", "period": "day"}}},
        "changes.budgets.A: the changed scenario is refused: policies[0].budgets: a money window in USD "
        "needs prices.USD",
    ),
    ({"time_weights": {"cpu": 1}}, "changes.time_weights.cpu: unknown profile"),
    ({"time_weights": {"gpu": "2"}}, "changes.time_weights.gpu: must be a number"),
    (
        {"pool_order": {"gpu": ["mars"]}},
        "changes.pool_order.gpu[0]: pool 'mars' is not in the profile's pools",
    ),
    (
        {"pool_order": {"gpu": []}},
        "changes.pool_order.gpu: must list each of the profile's pools (onprem) once",
    ),
    ({"capacities": {"mars": 4}}, "changes.capacities.mars: unknown pool"),
    ({"capacities": {"onprem": 0.0001}}, "changes.capacities.onprem: must be a multiple of 0.001 GPU"),
]


@pytest.mark.parametrize(("changes", "message"), BAD)
def test_bad_changes_name_the_field(changes, message):
    scenario = borrowing()
    before = copy.deepcopy(scenario)
    with pytest.raises(WhatIfError) as e:
        compare(scenario, changes)
    assert str(e.value).startswith(message), str(e.value)
    assert scenario == before


def test_a_cloud_pool_capacity_is_not_a_change():
    cloud = {
        "name": "cloud",
        "cloud": {"boot_s": 0, "idle_timeout_s": 60, "types": [{"name": "g1", "gpus": 1, "max": 2}]},
    }
    scenario = estate(pools=[{"name": "onprem", "capacity": 4}, cloud])
    with pytest.raises(WhatIfError, match=r"^changes.capacities.cloud: a cloud pool's capacity"):
        apply_changes(scenario, {"capacities": {"cloud": 4}})


def test_a_set_event_left_breaking_the_changed_rules_is_named_with_its_index_in_the_input():
    scenario = estate(events=[*submits("a", "a", 1), {"at": 5, "set_limit": {"policy": "B", "limit": 1}}])
    with pytest.raises(WhatIfError) as e:
        apply_changes(scenario, {"reservations": {"B": 2}})
    assert str(e.value) == (
        "changes.reservations.B: the changed scenario is refused: "
        "events[1].set_limit.limit: limit 1 GPU would be below the reservation 2 GPUs"
    )


def test_the_report_is_json_with_a_stable_order_and_the_same_on_every_run():
    first = compare(borrowing(), {"reservations": {"B": 2}})
    again = compare(borrowing(), {"reservations": {"B": 2}}, processes=2)
    assert json.dumps(first) == json.dumps(again)
    assert list(first) == ["wait_threshold_s", "changes", "base", "changed", "difference"]
    assert list(first["base"]["groups"]) == ["A", "B"]
    assert list(first["base"]["groups"]["A"]) == [
        "tasks",
        "wait_median_s",
        "wait_p95_s",
        "waited_past_threshold",
        "gpu_hours",
        "budget_hours",
        "preemptions",
        "budget_overshoot_hours",
    ]


def test_progress_reports_each_side_to_its_end():
    seen = []
    compare(borrowing(), {"reservations": {"B": 2}}, progress=lambda side, f: seen.append((side, f)))
    assert seen[-1] == ("changed", 1.0) and ("base", 1.0) in seen
    assert all(0 <= f <= 1 for _, f in seen)


def test_the_csv_rows():
    rows = to_csv_rows(compare(borrowing(), {"reservations": {"B": 2}}, wait_threshold_s=60))
    assert rows[0] == ["metric", "name", "base", "changed", "difference"]
    assert rows[1:9] == [
        ["tasks", "A", "4", "4", "0"],
        ["wait_median_s", "A", "0", "25", "25"],
        ["wait_p95_s", "A", "0", "50", "50"],
        ["waited_past_threshold", "A", "0", "0", "0"],
        ["gpu_hours", "A", "0.111111", "0.116667", "0.005556"],
        ["budget_hours", "A", "0.111111", "0.116667", "0.005556"],
        ["preemptions_budget", "A", "0", "0", "0"],
        ["preemptions_reclaim", "A", "0", "2", "2"],
    ]
    assert ["wait_median_s", "B", "90", "0", "-90"] in rows
    assert rows[-5:] == [
        ["utilization", "onprem", "0.125", "0.13", "0.005"],
        ["gpu_hours", "onprem", "0.138889", "0.144444", "0.005555"],
        ["preemptions_budget", "", "0", "0", "0"],
        ["preemptions_reclaim", "", "0", "2", "2"],
        ["tasks_completed", "", "6", "6", "0"],
    ]
