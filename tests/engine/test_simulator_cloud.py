"""The simulator's cloud pools: scale up on demand, boot delay, per-type caps, spot first, idle
release, node-hours in the summary, bad input naming the field, determinism."""

import copy
import io
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.engine.core.scenario import parse
from apps.engine.core.simulation import Simulation
from apps.engine.core.simulator import main

ROOT = Path(__file__).resolve().parents[2]


def scenario(types, events, boot_s=60, idle_timeout_s=120, duration_s=1000, policies=None, **extra):
    s = {
        "start": "2025-01-06T00:00:00Z",
        "duration_s": duration_s,
        "pools": [
            {"name": "cloud", "cloud": {"boot_s": boot_s, "idle_timeout_s": idle_timeout_s, "types": types}}
        ],
        "profiles": [{"name": "any", "gpus": 1, "size_from_task": True, "pools": ["cloud"]}],
        "policies": policies or [{"name": "A", "reservation": 0, "limit": 64}],
        "compute_resources": [{"name": "a", "policy": "A", "profile": "any"}],
        "events": events,
    }
    s.update(extra)
    return s


def submit(at, task, gpus, duration_s, resource="a", **more):
    return {
        "at": at,
        "submit": {"id": task, "resource": resource, "gpus": gpus, "duration_s": duration_s, **more},
    }


def run(s, *args, tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(s))
    out, err = io.StringIO(), io.StringIO()
    code = main([str(path), *args], stdout=out, stderr=err)
    assert code == 0, err.getvalue()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def nodes(lines):
    return [
        (e["at"], e["event"], e["type"], e["node"], e["market"])
        for e in lines
        if e.get("event") in ("scaled_up", "scaled_down")
    ]


def tasks(lines):
    return [(e["at"], e["task"], e["event"]) for e in lines if "task" in e]


G8 = [{"name": "g8", "gpus": 8, "max": 2, "spot": True}]


def test_a_task_placed_where_no_node_has_room_starts_boot_s_later_and_is_charged_from_placement(tmp_path):
    lines = run(scenario(G8, [submit(0, "t1", 1, 100)]), tmp_path=tmp_path)
    assert lines[:-1] == [
        {"at": 0, "task": "t1", "event": "placed", "pool": "cloud"},
        {"at": 0, "event": "scaled_up", "pool": "cloud", "type": "g8", "node": "cloud-1", "market": "spot"},
        {"at": 160, "task": "t1", "event": "completed"},
        {
            "at": 280,
            "event": "scaled_down",
            "pool": "cloud",
            "type": "g8",
            "node": "cloud-1",
            "market": "spot",
            "reason": "idle",
        },
    ]
    summary = lines[-1]["summary"]
    # charged from placement (0) to the end (160): the 60 s boot included
    assert summary["policies"]["A"] == {
        "gpu_hours": round(160 / 3600, 6),
        "budget_hours": round(160 / 3600, 6),
    }
    assert summary["tasks"]["t1"] == {"state": "completed", "preemptions": 0, "wait_s": 0}


def test_a_task_still_waiting_for_its_node_at_the_end_is_placed_and_charged(tmp_path):
    lines = run(scenario(G8, [submit(0, "t1", 1, 100)], duration_s=30), tmp_path=tmp_path)
    summary = lines[-1]["summary"]
    assert summary["tasks"]["t1"]["state"] == "placed"
    assert summary["policies"]["A"]["gpu_hours"] == round(30 / 3600, 6)


def test_work_placed_while_a_node_has_room_starts_at_once(tmp_path):
    lines = run(scenario(G8, [submit(0, "t1", 4, 100), submit(70, "t2", 4, 10)]), tmp_path=tmp_path)
    assert tasks(lines) == [
        (0, "t1", "placed"),
        (70, "t2", "placed"),
        (80, "t2", "completed"),
        (160, "t1", "completed"),
    ]
    assert len(nodes(lines)) == 2  # one node launched, released at 280


def test_boot_s_zero_starts_work_at_placement(tmp_path):
    lines = run(scenario(G8, [submit(0, "t1", 1, 5)], boot_s=0, idle_timeout_s=10), tmp_path=tmp_path)
    assert tasks(lines) == [(0, "t1", "placed"), (5, "t1", "completed")]
    assert nodes(lines) == [
        (0, "scaled_up", "g8", "cloud-1", "spot"),
        (15, "scaled_down", "g8", "cloud-1", "spot"),
    ]


def test_a_node_holding_no_task_is_released_after_exactly_idle_timeout_s(tmp_path):
    lines = run(scenario(G8, [submit(0, "t1", 1, 100)], idle_timeout_s=45), tmp_path=tmp_path)
    assert nodes(lines)[-1] == (205, "scaled_down", "g8", "cloud-1", "spot")  # t1 ended at 160


def test_new_work_before_the_idle_timeout_keeps_the_node_and_restarts_its_timer(tmp_path):
    events = [submit(0, "t1", 1, 100), submit(250, "t2", 1, 10)]  # idle from 160; t2 at 250 < 280
    lines = run(scenario(G8, events), tmp_path=tmp_path)
    assert nodes(lines) == [
        (0, "scaled_up", "g8", "cloud-1", "spot"),
        (380, "scaled_down", "g8", "cloud-1", "spot"),  # t2 ended at 260, + 120
    ]
    assert (260, "t2", "completed") in tasks(lines)


def test_a_node_that_comes_up_with_no_work_left_idles_out_from_its_boot(tmp_path):
    lines = run(scenario(G8, [submit(0, "t1", 1, 100), {"at": 10, "cancel": "t1"}]), tmp_path=tmp_path)
    assert nodes(lines) == [
        (0, "scaled_up", "g8", "cloud-1", "spot"),
        (180, "scaled_down", "g8", "cloud-1", "spot"),
    ]
    summary = lines[-1]["summary"]
    assert summary["tasks"]["t1"]["state"] == "canceled"
    assert summary["policies"]["A"]["gpu_hours"] == round(10 / 3600, 6)  # placement to cancel
    assert summary["pools"]["cloud"]["node_hours"] == round(180 / 3600, 6)
    assert summary["pools"]["cloud"]["idle_node_hours"] == round(120 / 3600, 6)


SMALL_BIG = [
    {"name": "small", "gpus": 1, "max": 4, "spot": False},
    {"name": "big", "gpus": 4, "max": 1, "spot": False},
]


def test_the_first_type_in_list_order_whose_gpus_fit_the_largest_waiting_task_is_launched(tmp_path):
    lines = run(scenario(SMALL_BIG, [submit(0, "t1", 4, 10)], duration_s=100), tmp_path=tmp_path)
    assert nodes(lines)[0] == (0, "scaled_up", "big", "cloud-1", "on-demand")
    lines = run(scenario(SMALL_BIG, [submit(0, "t1", 1, 10)], duration_s=100), tmp_path=tmp_path)
    assert nodes(lines)[0] == (0, "scaled_up", "small", "cloud-1", "on-demand")


def test_no_node_is_launched_of_a_type_that_holds_no_task_waiting_for_a_node(tmp_path):
    # t2 needs 4 GPUs and big is at its max: a small node could hold neither task and would only
    # idle out, so none is launched; t2 runs on the big node once t1 ends.
    lines = run(scenario(SMALL_BIG, [submit(0, "t1", 4, 100), submit(0, "t2", 4, 50)]), tmp_path=tmp_path)
    assert nodes(lines) == [
        (0, "scaled_up", "big", "cloud-1", "on-demand"),
        (330, "scaled_down", "big", "cloud-1", "on-demand"),
    ]
    assert tasks(lines)[2:] == [(160, "t1", "completed"), (210, "t2", "completed")]


def test_per_type_max_is_respected_and_the_engine_places_up_to_the_pool_maximum(tmp_path):
    types = [{"name": "g2", "gpus": 2, "max": 3}]
    lines = run(scenario(types, [submit(0, f"t{i}", 1, 100) for i in range(10)]), tmp_path=tmp_path)
    up = [n for n in nodes(lines) if n[1] == "scaled_up"]
    assert [n[3] for n in up] == ["cloud-1", "cloud-2", "cloud-3"]
    assert sum(1 for _, _, event in tasks(lines) if event == "placed") == 10  # 6 at 0, 4 once room frees
    assert [t for at, t, event in tasks(lines) if event == "placed" and at == 0] == [
        f"t{i}" for i in range(6)
    ]


def test_spot_first_and_on_demand_when_spot_is_not_available(tmp_path):
    types = [
        {"name": "g8", "gpus": 8, "max": 1, "spot": True, "spot_available": False},
        {"name": "g4", "gpus": 4, "max": 1},
    ]
    lines = run(scenario(types, [submit(0, "t1", 8, 10), submit(0, "t2", 4, 10)]), tmp_path=tmp_path)
    assert nodes(lines)[:2] == [
        (0, "scaled_up", "g8", "cloud-1", "on-demand"),
        (0, "scaled_up", "g4", "cloud-2", "spot"),
    ]


def test_node_hours_per_pool_type_and_market_are_exact(tmp_path):
    types = [
        {"name": "g8", "gpus": 8, "max": 1, "spot": True, "spot_available": False},
        {"name": "g4", "gpus": 4, "max": 1},
    ]
    # g8 (on-demand) 0..(60+300+120)=480; g4 (spot) 0..(60+900)=960 still up at the end (1000: idle 40 s)
    events = [submit(0, "t1", 8, 300), submit(0, "t2", 4, 900)]
    summary = run(scenario(types, events), tmp_path=tmp_path)[-1]["summary"]
    assert summary["pools"]["cloud"] == {
        "utilization": round((8 * 360 + 4 * 960) / (12 * 1000), 6),
        "node_hours": round((480 + 1000) / 3600, 6),
        "idle_node_hours": round((120 + 40) / 3600, 6),
        "node_hours_by_type": {
            "g8": {"on-demand": round(480 / 3600, 6)},
            "g4": {"spot": round(1000 / 3600, 6)},
        },
    }


def test_work_preempted_while_its_node_boots_keeps_its_whole_runtime(tmp_path):
    s = scenario(
        [{"name": "g1", "gpus": 1, "max": 1}],
        [submit(0, "b1", 1, 30, resource="b", checkpoint=True), submit(10, "a1", 1, 20)],
        policies=[{"name": "A", "reservation": 1, "limit": 1}, {"name": "B", "reservation": 0, "limit": 1}],
        duration_s=400,
    )
    s["compute_resources"].append({"name": "b", "policy": "B", "profile": "any"})
    lines = run(s, tmp_path=tmp_path)
    assert tasks(lines) == [
        (0, "b1", "placed"),
        (10, "b1", "preempted"),
        (10, "a1", "placed"),
        (80, "a1", "completed"),  # node up at 60
        (80, "b1", "placed"),
        (110, "b1", "completed"),  # it had not run: all 30 s left
    ]
    summary = lines[-1]["summary"]
    assert summary["policies"]["B"]["gpu_hours"] == round((10 + 30) / 3600, 6)
    assert summary["policies"]["A"]["gpu_hours"] == round(70 / 3600, 6)
    assert nodes(lines) == [
        (0, "scaled_up", "g1", "cloud-1", "spot"),
        (230, "scaled_down", "g1", "cloud-1", "spot"),
    ]


def test_work_preempted_elsewhere_and_placed_on_a_cloud_pool_runs_from_its_node_not_its_old_end(tmp_path):
    s = scenario(
        [{"name": "g1", "gpus": 1, "max": 1}],
        [submit(0, "b1", 1, 50, resource="b"), submit(10, "a1", 1, 500)],
        policies=[{"name": "A", "reservation": 1, "limit": 1}, {"name": "B", "reservation": 0, "limit": 1}],
        duration_s=300,
    )
    s["pools"].insert(0, {"name": "onprem", "capacity": 1})
    s["profiles"] = [
        {"name": "owned", "gpus": 1, "pools": ["onprem"]},
        {"name": "any", "gpus": 1, "size_from_task": True, "pools": ["onprem", "cloud"]},
    ]
    s["compute_resources"] = [
        {"name": "a", "policy": "A", "profile": "owned"},
        {"name": "b", "policy": "B", "profile": "any"},
    ]
    lines = run(s, tmp_path=tmp_path)
    assert tasks(lines) == [
        (0, "b1", "placed"),
        (10, "b1", "preempted"),
        (10, "a1", "placed"),
        (11, "b1", "placed"),
        (121, "b1", "completed"),  # node up at 71; not at 50, when its first run would have ended
    ]


def test_a_scenario_without_cloud_pools_has_no_node_figures(tmp_path):
    s = scenario(G8, [submit(0, "t1", 1, 10)])
    s["pools"] = [{"name": "cloud", "capacity": 8}]
    lines = run(s, tmp_path=tmp_path)
    assert lines[-1]["summary"]["pools"] == {"cloud": {"utilization": round(10 / 8000, 6)}}
    assert nodes(lines) == []


def test_the_same_input_gives_the_same_output_bytes_under_any_hash_seed(tmp_path):
    path = tmp_path / "s.json"
    events = [submit(i * 7 % 50, f"t{i}", [0.5, 1, 2, 4][i % 4], 20 + i) for i in range(30)]
    path.write_text(json.dumps(scenario(SMALL_BIG + G8, events)))
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
    assert '"scaled_up"' in outs.pop()


def with_cloud(**changes):
    s = scenario(copy.deepcopy(G8), [submit(0, "t1", 1, 10)])
    cloud = s["pools"][0]["cloud"]
    for key, value in changes.items():
        if value is KeyError:
            del cloud[key]
        else:
            cloud[key] = value
    return s


def with_type(**changes):
    s = with_cloud()
    t = s["pools"][0]["cloud"]["types"][0]
    for key, value in changes.items():
        if value is KeyError:
            del t[key]
        else:
            t[key] = value
    return s


def fixed_profile(gpus):
    s = with_cloud()
    s["profiles"] = [{"name": "any", "gpus": gpus, "pools": ["cloud"]}]
    s["events"] = []
    return s


BAD = [
    (with_cloud(boot_s=KeyError), "pools[0].cloud.boot_s: required"),
    (with_cloud(boot_s=-1), "pools[0].cloud.boot_s: must be >= 0, got -1"),
    (with_cloud(idle_timeout_s=0), "pools[0].cloud.idle_timeout_s: must be > 0"),
    (with_cloud(types=[]), "pools[0].cloud.types: needs at least one instance type"),
    (with_cloud(types="g8"), "pools[0].cloud.types: must be a list"),
    (with_cloud(zone="eu"), "pools[0].cloud.zone: unknown field"),
    (with_type(gpus=0), "pools[0].cloud.types[0].gpus: must be a whole number of GPUs >= 1, got 0"),
    (with_type(gpus=1.5), "pools[0].cloud.types[0].gpus: must be a whole number of GPUs >= 1, got 1.5"),
    (with_type(max=0), "pools[0].cloud.types[0].max: must be a whole number >= 1"),
    (with_type(max=True), "pools[0].cloud.types[0].max: must be a whole number >= 1"),
    (with_type(name=KeyError), "pools[0].cloud.types[0].name: required"),
    (with_type(spot="yes"), "pools[0].cloud.types[0].spot: must be true or false"),
    (with_type(spot_available=1), "pools[0].cloud.types[0].spot_available: must be true or false"),
    (with_type(price=3), "pools[0].cloud.types[0].price: unknown field"),
    (
        with_cloud(types=[{"name": "g8", "gpus": 8, "max": 1}, {"name": "g8", "gpus": 4, "max": 1}]),
        "pools[0].cloud.types[1].name: 'g8' is used twice",
    ),
    (
        {**with_cloud(), "pools": [{**with_cloud()["pools"][0], "capacity": 8}]},
        "pools[0].capacity: a cloud pool's capacity is its types' maximum (sum of max x gpus: 16 GPUs), "
        "got 8 GPUs; leave it out",
    ),
    (
        fixed_profile(16),
        "profiles[0].pools[0]: profile 'any' (16 GPUs) does not fit one node of cloud pool 'cloud' "
        "(its largest type has 8 GPUs)",
    ),
    (
        {**with_cloud(), "events": [submit(0, "t1", 9, 10)]},
        "events[0].submit.gpus: 9 GPUs do not fit one node of cloud pool 'cloud' "
        "(its largest type has 8 GPUs)",
    ),
    (
        {**with_cloud(), "events": [{"at": 5, "set_capacity": {"pool": "cloud", "capacity": 4}}]},
        "events[0].set_capacity.pool: 'cloud' is a cloud pool: its capacity is its types' maximum",
    ),
]


@pytest.mark.parametrize("bad,message", BAD, ids=[m.split(":")[0] + f"-{i}" for i, (_, m) in enumerate(BAD)])
def test_bad_cloud_input_exits_2_with_one_line_naming_the_field(bad, message, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    out, err = io.StringIO(), io.StringIO()
    assert main([str(path)], stdout=out, stderr=err) == 2
    assert out.getvalue() == ""
    assert err.getvalue() == f"simulate: {message}\n"


def test_a_cloud_pool_may_state_its_capacity_when_it_equals_the_maximum(tmp_path):
    s = with_cloud()
    s["pools"][0]["capacity"] = 16
    assert run(s, tmp_path=tmp_path)[-1]["summary"]["pools"]["cloud"]["node_hours"] > 0


# -- properties -------------------------------------------------------------------------------


class WatchedSimulation(Simulation):
    """Checks the cloud invariants after every autoscaler step."""

    started: dict

    def _stop(self, task, end_us, state):
        if state == "completed":
            assert task.started_us is not None and end_us == task.started_us + task.left_us
        super()._stop(task, end_us, state)

    def _autoscale(self, t):
        changed = super()._autoscale(t)
        self.started = getattr(self, "started", {})
        for i, cloud in self.clouds.items():
            spec = self.sc.pools[i].cloud
            counts = Counter(n.type for n in cloud.nodes)
            for k, ty in enumerate(spec.types):
                assert counts[k] <= ty.max, f"{ty.name}: {counts[k]} live nodes above max {ty.max}"
                assert counts[k] == cloud.count[k]
            supply = sum(n.capacity for n in cloud.nodes)
            assert supply <= self.capacity[i]
            held = Counter()
            for task_id, node in cloud.on_node.items():
                task = self.tasks[task_id]
                assert task.state == "running" and task.started_us is not None
                assert node.up and node.ready_us <= task.started_us
                held[node.name] += task.size
                self.started[task_id] = (task.placed_us, task.started_us)
            for node in cloud.nodes:
                assert node.held == held[node.name] <= node.capacity
                assert node.tasks or node.held == 0
            for task_id in cloud.waiting:
                task = self.tasks[task_id]
                assert task.state == "running" and task.started_us is None
            placed = sum(self.tasks[x].size for x in [*cloud.on_node, *cloud.waiting])
            assert placed == self.pool_used[i] <= self.capacity[i]
            # the autoscaler covers what is placed unless no type with room holds a waiting task
            smallest = min((self.tasks[x].size for x in cloud.waiting), default=None)
            assert (
                placed <= supply
                or smallest is None
                or all(counts[k] == ty.max or ty.gpus < smallest for k, ty in enumerate(spec.types))
            )
        return changed


@st.composite
def cloud_scenarios(draw):
    sizes = [0.5, 1, 2, 4, 8]
    types = []
    for k in range(draw(st.integers(1, 3))):
        types.append(
            {
                "name": f"type{k}",
                "gpus": draw(st.sampled_from([1, 2, 4, 8])),
                "max": draw(st.integers(1, 3)),
                "spot": draw(st.booleans()),
                "spot_available": draw(st.booleans()),
            }
        )
    limit = draw(st.sampled_from([4, 8, 64]))
    largest = min(limit, max(t["gpus"] for t in types))
    n = draw(st.integers(1, 25))
    events = []
    for i in range(n):
        gpus = draw(st.sampled_from([s for s in sizes if s <= largest]))
        at, duration = draw(st.integers(0, 200)), draw(st.integers(1, 150))
        resource, checkpoint = draw(st.sampled_from(["a", "b"])), draw(st.booleans())
        events.append(submit(at, f"t{i}", gpus, duration, resource=resource, checkpoint=checkpoint))
    for i in draw(st.lists(st.integers(0, n - 1), max_size=3, unique=True)):
        events.append({"at": draw(st.integers(0, 250)), "cancel": f"t{i}"})
    events.sort(key=lambda e: e["at"])
    events = [
        e
        for e in events
        if "submit" in e
        or any(x.get("submit", {}).get("id") == e["cancel"] and x["at"] <= e["at"] for x in events)
    ]
    s = scenario(
        types,
        events,
        boot_s=draw(st.integers(0, 40)),
        idle_timeout_s=draw(st.integers(1, 60)),
        duration_s=draw(st.integers(50, 600)),
        policies=[
            {"name": "A", "reservation": 0, "limit": limit},
            {"name": "B", "reservation": draw(st.integers(0, 4)), "limit": limit},
        ],
    )
    s["compute_resources"].append({"name": "b", "policy": "B", "profile": "any"})
    if draw(st.booleans()):
        s["pools"].insert(0, {"name": "onprem", "capacity": draw(st.integers(0, 8))})
        s["profiles"][0]["pools"] = ["onprem", "cloud"]
    if draw(st.booleans()):
        s["pass_interval_s"] = draw(st.sampled_from([0.5, 2, 5]))
    return s


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cloud_scenarios())
def test_cloud_invariants_hold_at_every_step_of_random_runs(data):
    sc = parse(data)
    sim = WatchedSimulation(sc, sc.duration_us)
    lines = list(sim.run())
    assert lines == list(Simulation(parse(data), sc.duration_us).run())  # deterministic
    boot_us = sc.pools[-1].cloud.boot_us
    launched, spent = {}, 0
    for e in lines[:-1]:
        if e.get("event") == "scaled_up":
            launched[e["node"]] = e["at"]
        elif e.get("event") == "scaled_down":
            spent += e["at"] - launched.pop(e["node"])
    spent += sum(sc.duration_us / 1e6 - at for at in launched.values())
    pool = lines[-1]["summary"]["pools"]["cloud"]
    assert pool["node_hours"] == pytest.approx(spent / 3600, abs=1e-5)
    assert sum(sum(m.values()) for m in pool["node_hours_by_type"].values()) == pytest.approx(
        pool["node_hours"], abs=1e-5
    )
    assert 0 <= pool["idle_node_hours"] <= pool["node_hours"]
    for placed_us, started_us in getattr(sim, "started", {}).values():
        assert started_us >= placed_us
        assert started_us == placed_us or started_us >= boot_us
