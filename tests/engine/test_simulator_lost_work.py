"""The simulator's lost work (issue 37 part 4): a submit's `checkpoint_s` (the task checkpoints
every N seconds of running), reclaim taking the victim that loses least, a preempted task resuming
from its last checkpoint, and the summary's lost GPU-hours per policy and reason."""

import pytest

from apps.engine.core.scenario import parse
from apps.engine.core.scenario_model import ScenarioError
from apps.engine.core.simulation import Simulation

BASE = {
    "start": "2025-01-06T00:00:00Z",
    "duration_s": 1200,
    "pools": [{"name": "onprem", "capacity": 2}],
    "profiles": [{"name": "gpu", "gpus": 1, "pools": ["onprem"]}],
    "policies": [{"name": "A", "reservation": 0, "limit": 2}, {"name": "B", "reservation": 2, "limit": 2}],
    "compute_resources": [
        {"name": "a", "policy": "A", "profile": "gpu"},
        {"name": "b", "policy": "B", "profile": "gpu"},
    ],
}


def submit(task, at=0, resource="a", duration_s=1000, **extra):
    return {"at": at, "submit": {"id": task, "resource": resource, "duration_s": duration_s} | extra}


def run(events) -> list[dict]:
    parsed = parse(BASE | {"events": events})
    return list(Simulation(parsed, parsed.duration_us).run())


def test_lost_work_simulator_reclaims_the_task_that_checkpointed_and_counts_what_it_lost():
    # a1 checkpoints every 60 s, a2 never; both placed at 0 on B's idle reservation. At 150 B's
    # task takes one back: a1 last saved at 120 (30 s lost), a2 at 0 (150 s): a1 goes although
    # a2 is newer. It resumes at 250 with 880 s left and ends at 1130; 1 GPU x 30 s = 0.008333 h.
    lines = run(
        [submit("a1", checkpoint_s=60), submit("a2"), submit("b1", at=150, resource="b", duration_s=100)]
    )
    moves = [(e["at"], e["task"], e["event"]) for e in lines if e.get("event") in ("preempted", "completed")]
    assert moves == [(150, "a1", "preempted"), (250, "b1", "completed"), (1000, "a2", "completed")] + [
        (1130, "a1", "completed")
    ]
    summary = lines[-1]["summary"]
    assert summary["lost_gpu_hours"] == {"A": {"reclaim": 0.008333}}


def test_lost_work_checkpoint_s_is_refused_on_a_session_or_without_checkpointing():
    with pytest.raises(ScenarioError, match="checkpoint_s"):
        parse(BASE | {"events": [submit("a1", checkpoint_s=0)]})
    with pytest.raises(ScenarioError, match="checkpoint_s"):
        parse(BASE | {"events": [submit("a1", checkpoint_s=60, checkpoint=False)]})
    with pytest.raises(ScenarioError, match="session"):
        parse(BASE | {"events": [submit("s1", kind="session", checkpoint_s=60)]})
