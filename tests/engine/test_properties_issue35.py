"""Property tests of issue 35's rules: random estates with deadlines, held tasks and capped arrays
(one pass, checked by the oracle of `test_properties` and the rules' own invariants), and random
simulated runs with time limits, dependencies and arrays (every pass checked, and the run's events:
never more than max_running of an array running, no task running before what it runs after has
ended, none of a failed after_ok chain ever running, none running past its time limit)."""

from collections import defaultdict
from dataclasses import replace
from datetime import timedelta

from engine_helpers import NOW
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import CheckedSimulation, check_pass, estates, scenarios

from apps.engine.core import HeldTask
from apps.engine.core.scenario import parse

DEADLINES = (None, None, NOW - timedelta(seconds=30), NOW, NOW + timedelta(seconds=30))


@st.composite
def estates_35(draw):
    s = draw(estates())
    pick = st.sampled_from([None, "x", "x", "y"])
    placed = tuple(replace(t, array=draw(pick), deadline=draw(st.sampled_from(DEADLINES))) for t in s.placed)
    waiting = {rid: tuple(replace(t, array=draw(pick)) for t in q) for rid, q in s.waiting.items()}
    held = ()
    if s.resources:
        held = tuple(
            HeldTask(f"h{i}", draw(st.sampled_from(s.resources)).id, 1000 + i, ("t0",))
            for i in range(draw(st.integers(0, 3)))
        )
    arrays = {"x": draw(st.integers(0, 3))}  # "y" is an array without a cap
    return replace(s, placed=placed, waiting=waiting, held=held, arrays=arrays)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(estates_35())
def test_one_pass_keeps_arrays_under_their_cap_places_no_held_task_and_stops_work_at_its_deadline(s):
    d = check_pass(s)
    placed_now = {p.task for p in d.placements}
    assert not placed_now & {h.id for h in s.held}, "a held task was placed"
    stopped = {p.task for p in d.preemptions}
    ended = {p.task for p in d.preemptions if p.reason in ("time_limit", "budget")}  # before any start
    cap = s.arrays["x"]
    x = [t for t in s.placed if t.array == "x" and not t.preempting]
    after = sum(1 for t in x if t.id not in stopped)
    counted = sum(1 for t in x if t.id not in ended)  # a later stop frees its place the next pass
    started = sum(1 for rid, q in s.waiting.items() for t in q if t.id in placed_now and t.array == "x")
    if started:
        assert counted + started <= cap, "more than max_running of an array placed"
    assert after + started <= max(cap, len(x))
    for v in d.verdicts():
        if v.rule == "array_limit":
            assert v.cause == "x" and v.max_running == cap and counted + started >= cap
    waiting_x = [t.id for q in s.waiting.values() for t in q if t.array == "x" and t.id not in placed_now]
    if counted + started >= cap:
        held_by_cap = {v.task for v in d.array_verdicts()}
        assert held_by_cap <= set(waiting_x)
        assert all(d.verdict(t).rule in ("array_limit", *EARLIER) for t in waiting_x)


EARLIER = ("never_fits", "budget_used_up", "policy_limit", "ancestor_limit", "budget_start_check")


@st.composite
def scenarios_35(draw):
    data = draw(scenarios())
    submits = [e["submit"] for e in data["events"] if "submit" in e]
    ids = []
    for sub in submits:
        if draw(st.integers(0, 2)) == 0:
            sub["time_limit_s"] = draw(st.integers(1, 40))
        earlier = ids[:]
        if earlier and draw(st.booleans()):
            needs = draw(st.lists(st.sampled_from(earlier), min_size=1, max_size=3, unique=True))
            split = draw(st.integers(0, len(needs)))
            if needs[:split]:
                sub["after_ok"] = needs[:split]
            if needs[split:]:
                sub["after_any"] = needs[split:]
        if draw(st.integers(0, 3)) == 0:
            sub["array"] = draw(st.integers(1, 4))
            if draw(st.booleans()):
                sub["max_running"] = draw(st.integers(1, 2))
        ids.append(sub["id"])
    return data


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios_35())
def test_every_pass_and_every_event_of_random_runs_with_time_limits_dependencies_and_arrays(data):
    sc = parse(data)
    lines = list(CheckedSimulation(sc, sc.duration_us).run())
    summary = lines[-1]["summary"]
    spec = {e.what.id: e.what for e in sc.events if hasattr(e.what, "after_ok")}
    disabled = any("engine" in e for e in data["events"])
    running: dict[str, float] = {}
    ran: dict[str, float] = defaultdict(float)
    ended: dict[str, str] = {}
    by_array: dict[str, int] = defaultdict(int)
    for e in lines[:-1]:
        task, event, at = e["task"], e["event"], e["at"]
        s = spec[task]
        if event == "placed":
            for needed in (*s.after_ok, *s.after_any):
                assert needed in ended, f"{task} placed before {needed} ended"
            for needed in s.after_ok:
                assert ended[needed] == "completed", f"{task} placed after {needed} failed"
            running[task] = at
            if s.max_running is not None:
                by_array[s.array] += 1
                assert by_array[s.array] <= s.max_running, f"array {s.array} above its max_running"
            continue
        if task in running:
            ran[task] += at - running.pop(task)
            if s.max_running is not None:
                by_array[s.array] -= 1
        if event == "canceled" and e.get("reason") == "dependency_failed":
            assert any(ended.get(n, "completed") != "completed" for n in s.after_ok)
        if event in ("completed", "canceled", "timed_out", "rejected"):
            ended[task] = event
        if s.time_limit_us is not None and not disabled:
            assert ran[task] <= s.time_limit_us / 1e6, f"{task} ran past its time limit"
        if event == "timed_out" and not disabled:
            assert ran[task] == s.time_limit_us / 1e6
    assert sorted(summary["tasks"]) == sorted(spec)
    if "ends" in summary:
        assert summary["ends"]["timed_out"] == sum(1 for e in lines[:-1] if e["event"] == "timed_out")
        failed = sum(1 for e in lines[:-1] if e.get("reason") == "dependency_failed")
        assert summary["ends"]["dependency_failed"] == failed
    for line in summary["tasks"].values():
        if line["state"] == "waiting" and "waits_for" in line:
            assert all(n not in ended for n in line["waits_for"])
