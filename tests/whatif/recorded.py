"""A period recorded on the database for the what-if tests: tests/engine/test_whatif.py's borrowing
estate replayed through the real services and ``run_pass`` (``DatabaseReplay``), on 2025-01-06."""

import json
from datetime import UTC, datetime, timedelta

from apps.engine.core import scenario as scenarios
from apps.whatif.models import WhatIfRun
from apps.whatif.services import RunRequest
from tests.engine_live.db_scenario import DatabaseReplay

START = datetime(2025, 1, 6, tzinfo=UTC)
END = START + timedelta(seconds=1000)
CHANGES = {"reservations": {"vision": 2}}

# tests/engine/test_whatif.py's borrowing estate: agents fill the 4-GPU pool at 0 with 4 tasks of
# 100 s; vision submits 2 tasks of 50 s at 10 s.
BORROWING = {
    "start": "2025-01-06T00:00:00Z",
    "duration_s": 1000,
    "pools": [{"name": "onprem", "capacity": 4}],
    "profiles": [{"name": "gpu", "gpus": 1, "pools": ["onprem"]}],
    "policies": [
        {"name": "agents", "reservation": 0, "limit": 4},
        {"name": "vision", "reservation": 0, "limit": 4},
    ],
    "compute_resources": [
        {"name": "agents/gpu", "policy": "agents", "profile": "gpu"},
        {"name": "vision/gpu", "policy": "vision", "profile": "gpu"},
    ],
    "events": [
        *(
            {"at": 0, "submit": {"id": f"a{i}", "resource": "agents/gpu", "duration_s": 100}}
            for i in range(4)
        ),
        *(
            {"at": 10, "submit": {"id": f"v{i}", "resource": "vision/gpu", "duration_s": 50}}
            for i in range(2)
        ),
    ],
}


def record(settings) -> None:
    """Record BORROWING on the database: tasks, placements and usage intervals of 2025-01-06."""
    sc = scenarios.parse(json.loads(json.dumps(BORROWING)))
    settings.LOW_WATERMARK_S = sc.low_watermark_s
    DatabaseReplay(sc).run()


def asked(**overrides) -> RunRequest:
    fields = {"start": START, "end": END, "groups": [], "changes": CHANGES, "wait_threshold_s": 60}
    return RunRequest(**(fields | overrides))


def assert_the_reservation_moved_the_waits(run: WhatIfRun) -> None:
    """The figures of tests/engine/test_whatif.py's reclaim test, now from the recorded period:
    without a reservation vision waits for agents' tasks to end (100 - 10 = 90 s); with 2 GPUs
    reserved it reclaims 2 of agents' borrowed GPUs at 10 s and waits 0, and agents' 2 preempted
    tasks restart from zero when vision's end, at 60 s (agents' waits 0, 0, 50, 50)."""
    assert (run.state, run.error, run.progress, run.tasks) == ("done", "", 1.0, 6)
    report = run.report
    base, changed, diff = (report[side]["groups"] for side in ("base", "changed", "difference"))
    assert base["vision"] | {"preemptions": None} == {
        "tasks": 2,
        "wait_median_s": 90,
        "wait_p95_s": 90,
        "waited_past_threshold": 2,
        "gpu_hours": 0.027778,
        "budget_hours": 0.027778,
        "preemptions": None,
        "budget_overshoot_hours": {},
    }
    assert (changed["vision"]["wait_median_s"], changed["vision"]["wait_p95_s"]) == (0, 0)
    assert changed["vision"]["waited_past_threshold"] == 0
    assert (diff["vision"]["wait_median_s"], diff["vision"]["wait_p95_s"]) == (-90, -90)
    assert (base["agents"]["wait_median_s"], base["agents"]["wait_p95_s"]) == (0, 0)
    assert (changed["agents"]["wait_median_s"], changed["agents"]["wait_p95_s"]) == (25, 50)
    assert changed["agents"]["preemptions"] == {"budget": 0, "reclaim": 2}
    # agents' GPU-hours: 4 x 100 s, plus the 2 x 10 s lost to the reclaim = 420 GPU-s.
    assert (base["agents"]["gpu_hours"], changed["agents"]["gpu_hours"]) == (0.111111, 0.116667)
    assert report["base"]["pools"]["onprem"] == {"utilization": 0.125, "gpu_hours": 0.138889}
    assert report["changed"]["pools"]["onprem"] == {"utilization": 0.13, "gpu_hours": 0.144444}
    assert report["base"]["tasks"] == report["changed"]["tasks"] == {"completed": 6}
    assert report["changes"] == CHANGES and report["wait_threshold_s"] == 60
