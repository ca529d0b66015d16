"""The database path decides issue 35's work as the pure core does: a scenario with time limits (a
profile's maximum, a compute resource's default, a limit counted across a reclaim), dependencies
(an ``after_ok`` chain canceled by a timed-out task, an ``after_any`` released by it) and a capped
array, replayed through ``run_pass`` on the database and compared line by line with the simulator.
The core's own scenarios of these rules join ``test_scenarios_db.MIRRORED`` as they come."""

import json

import pytest

from apps.engine.core import scenario as scenarios
from tests.engine_live.db_scenario import DatabaseReplay
from tests.engine_live.test_scenarios_db import simulated

pytestmark = pytest.mark.django_db

SCENARIO = {
    "start": "2026-03-02T00:00:00Z",
    "duration_s": 200,
    "pools": [{"name": "onprem", "capacity": 3}],
    "profiles": [{"name": "gpu1", "gpus": 1, "pools": ["onprem"], "max_time_limit_s": 3600}],
    "policies": [{"name": "a", "reservation": 2, "limit": 3}, {"name": "b", "reservation": 1, "limit": 3}],
    "compute_resources": [
        {"name": "a/gpu1", "policy": "a", "profile": "gpu1", "default_time_limit_s": 50},
        {"name": "b/gpu1", "policy": "b", "profile": "gpu1"},
    ],
    "events": [
        {"at": 0, "submit": {"id": "borrower", "resource": "b/gpu1", "duration_s": 100, "time_limit_s": 30}},
        {"at": 0, "submit": {"id": "b2", "resource": "b/gpu1", "duration_s": 100, "time_limit_s": 60}},
        {"at": 0, "submit": {"id": "b3", "resource": "b/gpu1", "duration_s": 100, "time_limit_s": 600}},
        {"at": 1, "submit": {"id": "next", "resource": "b/gpu1", "duration_s": 5, "after_ok": ["borrower"]}},
        {"at": 1, "submit": {"id": "last", "resource": "b/gpu1", "duration_s": 5, "after_ok": ["next"]}},
        {"at": 1, "submit": {"id": "tidy", "resource": "b/gpu1", "duration_s": 5, "after_any": ["borrower"]}},
        {"at": 10, "submit": {"id": "own", "resource": "a/gpu1", "duration_s": 15}},
        {"at": 10, "submit": {"id": "own2", "resource": "a/gpu1", "duration_s": 15}},
        {
            "at": 40,
            "submit": {"id": "sweep", "resource": "a/gpu1", "duration_s": 20, "array": 4, "max_running": 2},
        },
    ],
}


def test_time_limits_dependencies_and_arrays_replay_on_the_database_as_in_the_simulator(settings):
    sc = scenarios.loads(json.dumps(SCENARIO))
    settings.LOW_WATERMARK_S = sc.low_watermark_s
    expected = simulated(sc)
    assert {"task": "borrower", "event": "timed_out"}.items() <= next(
        line for line in expected if line.get("event") == "timed_out"
    ).items()
    assert any(line.get("reason") == "dependency_failed" and line["task"] == "last" for line in expected)
    # b2 ran 10 s before a reclaim and 50 s from its restart at 25: its 60 s are up at 75
    assert {"at": 75, "task": "b2", "event": "timed_out"} in expected
    assert DatabaseReplay(sc).run() == expected
