"""What-if changes of issue 34 (docs/whatif.md, "The changes"): `lending` switches a parent policy
between "priority" and "fair", `over_quota_weights` sets a child's weight; both are checked by path
and reach the changed scenario; a preemption reason seen on one side only counts 0 on the other."""

import pytest

from apps.engine.core.whatif import compare, to_csv_rows
from apps.engine.core.whatif_changes import WhatIfError, apply_changes, changed_scenario


def family(lending=None, events=()):
    """Parent `dept` (no reservation, limit 4) over A and B (each reservation 0, limit 4), 4 GPUs."""
    dept = {"name": "dept", "reservation": 0, "limit": 4} | ({"lending": lending} if lending else {})
    return {
        "start": "2025-01-06T00:00:00Z",
        "duration_s": 1000,
        "pools": [{"name": "onprem", "capacity": 4}],
        "profiles": [{"name": "gpu", "gpus": 1, "pools": ["onprem"]}],
        "policies": [
            dept,
            {"name": "A", "parent": "dept", "reservation": 0, "limit": 4},
            {"name": "B", "parent": "dept", "reservation": 0, "limit": 4},
        ],
        "compute_resources": [
            {"name": "a", "policy": "A", "profile": "gpu"},
            {"name": "b", "policy": "B", "profile": "gpu"},
        ],
        "events": list(events),
    }


def test_switching_a_parent_to_fair_and_weighting_a_child_reach_the_changed_scenario():
    base = family()
    out, sc = changed_scenario(base, {"lending": {"dept": "fair"}, "over_quota_weights": {"A": 2, "B": 0.5}})
    assert [(p["name"], p.get("lending"), p.get("over_quota_weight")) for p in out["policies"]] == [
        ("dept", "fair", None),
        ("A", None, 2),
        ("B", None, 0.5),
    ]
    assert [(p.name, p.lending, p.over_quota_weight) for p in sc.policies] == [
        ("dept", "fair", 1000),
        ("A", "priority", 2000),
        ("B", "priority", 500),
    ]
    assert "lending" not in base["policies"][0] and "over_quota_weight" not in base["policies"][1]
    back = apply_changes(family("fair"), {"lending": {"dept": "priority"}})
    assert back["policies"][0]["lending"] == "priority"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"lending": {"dept": "fast"}}, 'changes.lending.dept: must be "priority" or "fair"'),
        ({"lending": {"dept": 1}}, 'changes.lending.dept: must be "priority" or "fair"'),
        ({"lending": {"nope": "fair"}}, "changes.lending.nope: unknown policy"),
        ({"lending": ["dept"]}, "changes.lending: must be an object"),
        ({"over_quota_weights": {"A": -1}}, "changes.over_quota_weights.A: must be >= 0, got -1"),
        ({"over_quota_weights": {"A": "2"}}, "changes.over_quota_weights.A: must be a number"),
        ({"over_quota_weights": {"A": 0.0001}}, "changes.over_quota_weights.A: must be a multiple of 0.001"),
        ({"over_quota_weights": {"gpu": 1}}, "changes.over_quota_weights.gpu: unknown policy"),
    ],
)
def test_bad_lending_changes_name_the_field(changes, message):
    with pytest.raises(WhatIfError) as e:
        apply_changes(family(), changes)
    assert str(e.value) == message


def test_the_report_echoes_the_new_changes_after_the_earlier_kinds():
    changes = {"over_quota_weights": {"A": 3}, "lending": {"dept": "fair"}, "reservations": {"A": 1}}
    report = compare(family(), changes)
    assert list(report["changes"]) == ["reservations", "lending", "over_quota_weights"]
    assert report["changes"]["lending"] == {"dept": "fair"}


def test_a_reason_seen_on_one_side_only_counts_zero_on_the_other():
    """B reserves 2 GPUs in the changed run: its tasks reclaim from A, which borrowed the pool.
    The base side has no reclaim, yet its count is 0 and the difference a number."""
    events = [
        *({"at": 0, "submit": {"id": f"a{i}", "resource": "a", "duration_s": 500}} for i in range(4)),
        *({"at": 10, "submit": {"id": f"b{i}", "resource": "b", "duration_s": 50}} for i in range(2)),
    ]
    report = compare(family(events=events), {"reservations": {"B": 2, "dept": 2}})
    assert report["base"]["preemptions"] == {"budget": 0, "reclaim": 0}
    assert report["changed"]["preemptions"] == {"budget": 0, "reclaim": 2}
    assert report["difference"]["preemptions"] == {"budget": 0, "reclaim": 2}
    rows = to_csv_rows(report)
    assert ["preemptions_reclaim", "", "0", "2", "2"] in rows


def test_switching_a_parent_to_fair_shares_the_borrowed_gpus_and_switching_back_undoes_it():
    """A fills the 4 GPUs at 0 with 4 tasks of 500 s; B asks for 4 at 10 s. Under "priority" B waits
    for A's work to end (490 s each); under "fair" B takes its fair 2 GPUs at once from A
    (2 fair_share preemptions). The what-if from a fair estate back to priority is the mirror."""
    events = [
        *({"at": 0, "submit": {"id": f"a{i}", "resource": "a", "duration_s": 500}} for i in range(4)),
        *({"at": 10, "submit": {"id": f"b{i}", "resource": "b", "duration_s": 500}} for i in range(4)),
    ]
    report = compare(family(events=events), {"lending": {"dept": "fair"}})
    base, changed = report["base"]["groups"], report["changed"]["groups"]
    assert (base["B"]["wait_median_s"], base["B"]["wait_p95_s"]) == (490, 490)
    assert base["A"]["preemptions"] == {"budget": 0, "fair_share": 0, "reclaim": 0}
    assert changed["A"]["preemptions"] == {"budget": 0, "fair_share": 2, "reclaim": 0}
    assert report["difference"]["preemptions"]["fair_share"] == 2
    assert changed["B"]["wait_median_s"] < base["B"]["wait_median_s"]

    back = compare(family("fair", events), {"lending": {"dept": "priority"}})
    assert back["base"] == report["changed"] and back["changed"] == report["base"]


def test_a_reservation_lowered_below_the_lendable_part_lowers_the_lendable_part_with_it():
    base = family()
    base["policies"][1] |= {"reservation": 2, "lendable": 1.5}
    out = apply_changes(base, {"reservations": {"A": 1}})
    assert (out["policies"][1]["reservation"], out["policies"][1]["lendable"]) == (1, 1)
    assert apply_changes(base, {"reservations": {"A": 3}})["policies"][1]["lendable"] == 1.5
