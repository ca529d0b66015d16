"""Property tests of maintenance windows (issue 35, rule 3): random estates with windows in
progress or ahead, random time limits left and profiles that allow unlimited work or not. Nothing
is placed on a pool in maintenance, its work is stopped (reason maintenance), and no placement's
limit crosses its pool's next window's start; with no window anywhere, the new fields change
nothing."""

from dataclasses import replace
from datetime import timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import estates

from apps.engine.core import Maintenance, allocate, validate

LIMITS = st.sampled_from([None, 0, 30, 60, 600, 3600, 86400])


@st.composite
def with_fields(draw, windows: bool):
    s = draw(estates())
    profiles = tuple(replace(f, unlimited_before_maintenance=draw(st.booleans())) for f in s.profiles)
    waiting = {rid: tuple(replace(t, limit_s=draw(LIMITS)) for t in q) for rid, q in s.waiting.items()}
    pools = s.pools
    if windows:
        starts = st.sampled_from([-3600, -1, 0, 1, 60, 600, 7200])
        chosen = []
        for p in s.pools:
            if draw(st.booleans()):
                start = s.now + timedelta(seconds=draw(starts))
                first = Maintenance(
                    start, max(start, s.now) + timedelta(seconds=draw(st.sampled_from([1, 900])))
                )
                more = (Maintenance(first.end + timedelta(hours=1), first.end + timedelta(hours=2)),)
                p = replace(p, maintenance=(first, *more[: draw(st.integers(0, 1))]))
            chosen.append(p)
        pools = tuple(chosen)
    return replace(s, pools=pools, profiles=profiles, waiting=waiting)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_fields(windows=True))
def test_maintenance_no_placement_in_a_window_nor_across_the_next_start(s):
    validate(s)
    d = allocate(s)
    now = s.now
    pools = {p.id: p for p in s.pools}
    profiles = {f.id: f for f in s.profiles}
    resources = {r.id: r for r in s.resources}
    tasks = {t.id: t for q in s.waiting.values() for t in q}
    down = {p.id for p in s.pools if p.maintenance and p.maintenance[0].start <= now}
    for pl in d.placements:
        assert pl.pool not in down, f"{pl.task} placed on {pl.pool} in maintenance"
        pool = pools[pl.pool]
        if pool.maintenance:
            t, f = tasks[pl.task], profiles[resources[pl.resource].profile]
            start = pool.maintenance[0].start
            if t.limit_s is None:
                assert f.unlimited_before_maintenance, f"{pl.task}: no limit, placed before a window"
            else:
                assert now + timedelta(seconds=t.limit_s) <= start, f"{pl.task}: its limit crosses the start"
    stopped = {p.task: p.reason for p in d.preemptions}
    for t in s.placed:
        if t.pool in down and not t.preempting:
            assert stopped.get(t.id) in ("maintenance", "time_limit"), f"{t.id} left running in maintenance"
    for p in d.preemptions:
        if p.reason == "maintenance":
            assert p.pool in down
    verdicts = list(d.verdicts())
    placed_now = {p.task for p in d.placements}
    assert sorted(v.task for v in verdicts if v.rule != "dependency") == sorted(set(tasks) - placed_now)
    for v in verdicts:
        if v.rule == "maintenance":
            w = pools[v.pools[0]].maintenance[0]
            assert (v.since, v.reset_at) == (w.start, w.end)
            assert v.cause == ("in_maintenance" if v.pools[0] in down else "window_ahead")
    ahead = [v for v in verdicts if v.rule == "maintenance" and v.cause == "window_ahead"]
    assert list(d.maintenance_verdicts()) == ahead
    for v in ahead:
        assert d.verdict(v.task) == v


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(with_fields(windows=False))
def test_maintenance_fields_without_a_window_change_nothing(s):
    validate(s)
    plain = replace(
        s,
        profiles=tuple(replace(f, unlimited_before_maintenance=False) for f in s.profiles),
        waiting={rid: tuple(replace(t, limit_s=None) for t in q) for rid, q in s.waiting.items()},
    )
    d, base = allocate(s), allocate(plain)
    assert d.placements == base.placements and d.preemptions == base.preemptions
    assert list(d.verdicts()) == list(base.verdicts())
    assert d.maintenance_verdicts() == ()
