"""Sessions in the simulator: activity profiles and idle limits, never requeued, the GPU-hours
the limits free, bad input naming the field, determinism."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from apps.engine.core.scenario import parse
from apps.engine.core.simulation import Simulation
from apps.engine.core.simulator import main

ROOT = Path(__file__).resolve().parents[2]
H = 3600


def scenario(events, idle_limits=None, resource_limits=None, duration_s=1000, capacity=4, **extra):
    profile = {"name": "nb", "gpus": 1, "size_from_task": True, "pools": ["p"]}
    if idle_limits is not None:
        profile["idle_limits"] = idle_limits
    resource = {"name": "a", "policy": "A", "profile": "nb"}
    if resource_limits is not None:
        resource["idle_limits"] = resource_limits
    s = {
        "start": "2025-01-06T00:00:00Z",
        "duration_s": duration_s,
        "pools": [{"name": "p", "capacity": capacity}],
        "profiles": [profile],
        "policies": [{"name": "A", "reservation": 0, "limit": capacity}],
        "compute_resources": [resource],
        "events": events,
    }
    s.update(extra)
    return s


def session(at, task, activity=None, duration_s=None, resource="a", **more):
    body = {"id": task, "resource": resource, "kind": "session", **more}
    if activity is not None:
        body["activity"] = activity
    if duration_s is not None:
        body["duration_s"] = duration_s
    return {"at": at, "submit": body}


def run(s, *args, tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(s))
    out, err = io.StringIO(), io.StringIO()
    code = main([str(path), *args], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def refused(s, tmp_path) -> str:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(s))
    out, err = io.StringIO(), io.StringIO()
    assert main([str(path)], stdout=out, stderr=err) == 2
    assert out.getvalue() == ""
    lines = err.getvalue().splitlines()
    assert len(lines) == 1
    return lines[0]


def changes(lines):
    return [e for e in lines if "task" in e]


def summary(lines):
    return lines[-1]["summary"]


def test_a_session_not_busy_for_idle_s_stops_at_exactly_since_plus_idle_s(tmp_path):
    s = scenario([session(0, "s1", [[0, True], [10, False]])], idle_limits={"idle_s": 30})
    lines = run(s, tmp_path=tmp_path)
    assert changes(lines) == [
        {"at": 0, "task": "s1", "event": "placed", "pool": "p"},
        {"at": 40, "task": "s1", "event": "stopped", "reason": "idle", "limit": "idle"},
    ]
    assert summary(lines)["tasks"]["s1"] == {
        "state": "canceled",
        "preemptions": 0,
        "wait_s": 0,
        "kind": "session",
        "reason": "idle",
        "limit": "idle",
    }
    assert summary(lines)["policies"]["A"]["gpu_hours"] == round(40 / H, 6)


def test_the_idle_stop_is_exact_to_the_microsecond_and_reported_at_the_next_step(tmp_path):
    s = scenario([session(0, "s1", [[0.25, False]])], idle_limits={"idle_s": 10}, pass_interval_s=0.5)
    lines = run(s, tmp_path=tmp_path)
    assert changes(lines)[-1] == {
        "at": 10.5,
        "task": "s1",
        "event": "stopped",
        "reason": "idle",
        "limit": "idle",
    }
    assert summary(lines)["sessions"]["gpu_hours"] == round(10.25 / H, 6)


def test_a_busy_entry_restarts_the_idle_timer(tmp_path):
    s = scenario(
        [session(0, "s1", [[0, False], [29, True], [35, False], [50, True], [60, False]])],
        idle_limits={"idle_s": 30},
    )
    lines = run(s, tmp_path=tmp_path)
    assert [(e["at"], e["event"]) for e in changes(lines)] == [(0, "placed"), (90, "stopped")]


def test_a_busy_entry_exactly_at_the_deadline_comes_too_late(tmp_path):
    s = scenario([session(0, "s1", [[0, False], [30, True]])], idle_limits={"idle_s": 30})
    assert changes(run(s, tmp_path=tmp_path))[-1]["at"] == 30


def test_consecutive_not_busy_entries_are_one_idle_stretch(tmp_path):
    s = scenario([session(0, "s1", [[5, False], [20, False], [40, False]])], idle_limits={"idle_s": 30})
    assert changes(run(s, tmp_path=tmp_path))[-1]["at"] == 35


def test_before_its_first_entry_a_session_is_busy(tmp_path):
    s = scenario([session(0, "s1", [[100, False]])], idle_limits={"idle_s": 30})
    assert changes(run(s, tmp_path=tmp_path))[-1]["at"] == 130


def test_the_lifetime_limit_stops_a_busy_session_at_max_lifetime_s_after_its_start(tmp_path):
    s = scenario(
        [session(0, "hog", [[0, True]]), session(5, "s2", [[0, True]])],
        idle_limits={"idle_s": 30, "max_lifetime_s": 200},
        capacity=1,
    )
    lines = run(s, tmp_path=tmp_path)
    assert [(e["at"], e["task"], e["event"], e.get("limit")) for e in changes(lines)] == [
        (0, "hog", "placed", None),
        (200, "hog", "stopped", "lifetime"),
        (200, "s2", "placed", None),
        (400, "s2", "stopped", "lifetime"),
    ]
    assert summary(lines)["tasks"]["s2"]["wait_s"] == 195


def test_at_the_same_moment_the_duration_wins_then_idle_then_lifetime(tmp_path):
    s = scenario(
        [
            session(0, "done", [[0, False]], duration_s=30),
            session(0, "idle", [[0, False]]),
            session(0, "life", [[0, True], [10, False]]),
        ],
        idle_limits={"idle_s": 30, "max_lifetime_s": 30},
    )
    lines = run(s, tmp_path=tmp_path)
    assert [(e["task"], e["event"], e.get("limit")) for e in changes(lines) if e["at"] == 30] == [
        ("done", "completed", None),
        ("idle", "stopped", "idle"),
        ("life", "stopped", "lifetime"),
    ]


def test_without_limits_a_session_runs_to_its_duration_or_to_the_end(tmp_path):
    s = scenario([session(0, "s1", [[0, False]], duration_s=300), session(0, "s2", [[0, False]])])
    lines = run(s, tmp_path=tmp_path)
    assert [(e["at"], e["task"], e["event"]) for e in changes(lines)] == [
        (0, "s1", "placed"),
        (0, "s2", "placed"),
        (300, "s1", "completed"),
    ]
    tasks = summary(lines)["tasks"]
    assert tasks["s1"]["state"] == "completed" and tasks["s2"]["state"] == "running"
    assert summary(lines)["sessions"] == {
        "sessions": 2,
        "gpu_hours": round(1300 / H, 6),
        "freed_gpu_hours": 0,
        "stopped": {"idle": 0, "lifetime": 0},
        "compute_resources": {
            "a": {
                "sessions": 2,
                "gpu_hours": round(1300 / H, 6),
                "freed_gpu_hours": 0,
                "stopped": {"idle": 0, "lifetime": 0},
            }
        },
    }


def test_the_compute_resource_overrides_its_profiles_limits_one_by_one(tmp_path):
    s = scenario(
        [session(0, "s1", [[0, False]]), session(0, "s2", [[0, True]])],
        idle_limits={"idle_s": 30, "max_lifetime_s": 500},
        resource_limits={"idle_s": 100, "max_lifetime_s": None},
    )
    lines = run(s, tmp_path=tmp_path)
    assert [(e["at"], e["task"], e.get("limit")) for e in changes(lines) if e["event"] == "stopped"] == [
        (100, "s1", "idle"),
        (500, "s2", "lifetime"),
    ]


def test_a_preempted_session_ends_with_the_reason_and_is_not_requeued(tmp_path):
    s = scenario(
        [
            session(0, "s1", [[0, True]]),
            {"at": 10, "submit": {"id": "b1", "resource": "b", "gpus": 1, "duration_s": 50}},
        ],
        capacity=1,
    )
    s["policies"] = [
        {"name": "A", "reservation": 0, "limit": 1},
        {"name": "B", "reservation": 1, "limit": 1},
    ]
    s["compute_resources"].append({"name": "b", "policy": "B", "profile": "nb"})
    lines = run(s, tmp_path=tmp_path)
    assert [(e["at"], e["task"], e["event"]) for e in changes(lines)] == [
        (0, "s1", "placed"),
        (10, "s1", "preempted"),
        (10, "b1", "placed"),
        (60, "b1", "completed"),
    ]
    assert summary(lines)["tasks"]["s1"] == {
        "state": "canceled",
        "preemptions": 1,
        "wait_s": 0,
        "kind": "session",
        "reason": "reclaim",
    }
    assert summary(lines)["sessions"]["freed_gpu_hours"] == 0


def test_a_batch_task_is_still_requeued_and_idle_limits_do_not_touch_it(tmp_path):
    s = scenario(
        [{"at": 0, "submit": {"id": "t1", "resource": "a", "gpus": 1, "duration_s": 100}}],
        idle_limits={"idle_s": 1, "max_lifetime_s": 1},
    )
    lines = run(s, tmp_path=tmp_path)
    assert [(e["at"], e["event"]) for e in changes(lines)] == [(0, "placed"), (100, "completed")]
    assert "sessions" not in summary(lines)
    assert summary(lines)["tasks"]["t1"] == {"state": "completed", "preemptions": 0, "wait_s": 0}


def test_freed_gpu_hours_run_from_the_stop_to_the_duration_the_owners_cancel_or_the_end(tmp_path):
    s = scenario(
        [
            session(0, "dur", [[0, False]], duration_s=400, gpus=2),
            session(0, "open", [[0, True], [100, False]]),
            session(0, "cancel", [[0, False]]),
            {"at": 700, "cancel": "cancel"},
        ],
        idle_limits={"idle_s": 50},
    )
    lines = run(s, tmp_path=tmp_path)
    # dur: 2 GPUs, stopped at 50, would have run to 400; open: stopped at 150, to the end (1000);
    # cancel: stopped at 50, its owner would have stopped it at 700.
    freed = 2 * 350 + 850 + 650
    used = 2 * 50 + 150 + 50
    assert summary(lines)["sessions"]["freed_gpu_hours"] == round(freed / H, 6)
    assert summary(lines)["sessions"]["gpu_hours"] == round(used / H, 6)
    assert summary(lines)["sessions"]["stopped"] == {"idle": 3, "lifetime": 0}
    assert [e for e in changes(lines) if e["event"] == "canceled"] == []
    until = run(s, "--until", "500", tmp_path=tmp_path)
    assert summary(until)["sessions"]["freed_gpu_hours"] == round((2 * 350 + 350 + 450) / H, 6)


def test_a_session_on_a_cloud_pool_starts_when_its_node_is_up(tmp_path):
    cloud = {"boot_s": 60, "idle_timeout_s": 100, "types": [{"name": "g1", "gpus": 1, "max": 1}]}
    s = scenario([session(0, "s1", [[0, False]], duration_s=500)], idle_limits={"idle_s": 30})
    s["pools"] = [{"name": "p", "cloud": cloud}]
    s["policies"][0]["limit"] = 1
    lines = run(s, tmp_path=tmp_path)
    assert [(e["at"], e.get("task"), e["event"]) for e in lines[:-1]] == [
        (0, "s1", "placed"),
        (0, None, "scaled_up"),
        (90, "s1", "stopped"),
        (190, None, "scaled_down"),
    ]
    sessions = summary(lines)["sessions"]
    assert sessions["gpu_hours"] == round(90 / H, 6)  # charged from placement, boot included
    assert sessions["freed_gpu_hours"] == round((60 + 500 - 90) / H, 6)


def test_the_simulator_wakes_at_idle_deadlines_without_a_pass_every_step(tmp_path):
    s = scenario(
        [session(0, "s1", [[0, True], [86400, False]])],
        idle_limits={"idle_s": 7 * 86400},
        duration_s=30 * 86400,
    )

    class Counting(Simulation):
        passes = 0

        def _pass(self, t):
            self.passes += 1
            return super()._pass(t)

    sc = parse(s)
    sim = Counting(sc, sc.duration_us)
    lines = list(sim.run())
    assert [(e["at"], e["event"]) for e in lines if "task" in e] == [(0, "placed"), (8 * 86400, "stopped")]
    assert sim.passes <= 5


def test_the_same_input_gives_the_same_output_bytes_under_any_hash_seed(tmp_path):
    events = [
        session(i * 3 % 40, f"s{i}", [[0, True], [1 + i % 7 * 5, False], [100 + i, True], [130 + i, False]])
        for i in range(20)
    ]
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario(events, idle_limits={"idle_s": 20, "max_lifetime_s": 400})))
    outs = set()
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-m", "apps.engine.core.simulator", str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        outs.add(out)
    assert len(outs) == 1
    assert '"stopped"' in outs.pop()


def bad_submit(**body):
    return scenario([{"at": 0, "submit": {"id": "s1", "resource": "a", **body}}])


@pytest.mark.parametrize(
    ("s", "message"),
    [
        (bad_submit(kind="notebook"), 'events[0].submit.kind: must be "batch" or "session"'),
        (bad_submit(), "events[0].submit.duration_s: required"),
        (
            bad_submit(duration_s=5, activity=[[0, True]]),
            'events[0].submit.activity: only a task of kind "session" has an activity profile',
        ),
        (
            bad_submit(kind="session", checkpoint=True),
            "events[0].submit.checkpoint: a session is never requeued, so it takes no checkpoint",
        ),
        (
            bad_submit(kind="session", duration_s=0),
            "events[0].submit.duration_s: must be > 0 for a session (left out: it runs until stopped)",
        ),
        (bad_submit(kind="session", activity={"0": True}), "events[0].submit.activity: must be a list"),
        (
            bad_submit(kind="session", activity=[[0]]),
            "events[0].submit.activity[0]: must be a pair [at_s, busy]",
        ),
        (
            bad_submit(kind="session", activity=[[0, 1]]),
            "events[0].submit.activity[0][1]: must be true or false",
        ),
        (
            bad_submit(kind="session", activity=[[-1, True]]),
            "events[0].submit.activity[0][0]: must be >= 0, got -1",
        ),
        (
            bad_submit(kind="session", activity=[[5, True], [5, False]]),
            "events[0].submit.activity[1][0]: must be later than the entry before",
        ),
        (
            scenario([], idle_limits={"idle_s": 0}),
            "profiles[0].idle_limits.idle_s: must be > 0 and at most 30 days (2592000 s)",
        ),
        (
            scenario([], resource_limits={"max_lifetime_s": 2592001}),
            "compute_resources[0].idle_limits.max_lifetime_s: must be > 0 and at most 30 days (2592000 s)",
        ),
        (
            scenario([], idle_limits={"cpu_idle_s": 60}),
            "profiles[0].idle_limits.cpu_idle_s: the simulator has one idle limit, idle_s (a session is busy "
            "or not: CPU, GPU, network and Jupyter idle all read as not busy)",
        ),
        (scenario([], idle_limits={"idle": 60}), "profiles[0].idle_limits.idle: unknown field"),
        (scenario([], resource_limits=[60]), "compute_resources[0].idle_limits: must be an object"),
    ],
)
def test_bad_session_input_is_refused_naming_the_field(s, message, tmp_path):
    assert refused(s, tmp_path) == f"simulate: {message}"
