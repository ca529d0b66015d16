"""Small builders for engine snapshots in tests (GPU amounts in GPUs here, milli in the core)."""

from datetime import UTC, datetime, timedelta

from apps.engine.core import (
    Budget,
    ComputeResource,
    PlacedTask,
    Policy,
    Pool,
    Profile,
    Snapshot,
    WaitingTask,
    hours_to_units,
)

NOW = datetime(2025, 1, 8, 12, 0, tzinfo=UTC)  # a Wednesday
G = 1000


def pool(id, gpus, profiles, enabled=True):
    return Pool(id, round(gpus * G), tuple(profiles), enabled)


def profile(id, gpus, pools, policies, weight=1, size_from_task=False, min_runtime_s=0):
    return Profile(
        id, round(gpus * G), tuple(pools), tuple(policies), round(weight * G), size_from_task, min_runtime_s
    )


def window(budget_h, used_h=0, period="day"):
    return Budget(hours_to_units(str(budget_h)), period, hours_to_units(str(used_h)))


def policy(
    id,
    reservation,
    limit,
    parent=None,
    budget_h=None,
    used_h=0,
    period="day",
    windows=(),
    cap=None,
    reclaims=(),
):
    """A policy; `budget_h`/`used_h`/`period` give one budget window, `windows` more (see window())."""
    budgets = (() if budget_h is None else (window(budget_h, used_h, period),)) + tuple(windows)
    return Policy(id, round(reservation * G), round(limit * G), parent, budgets, cap, tuple(reclaims))


def cr(id, policy_id, profile_id):
    return ComputeResource(id, policy_id, profile_id)


def waiting(id, seq, gpus):
    return WaitingTask(id, seq, round(gpus * G))


def placed(id, resource, pool_id, gpus, seq, ago_s=0, preempting=False):
    return PlacedTask(id, resource, pool_id, round(gpus * G), seq, NOW - timedelta(seconds=ago_s), preempting)


def snapshot(pools, profiles, policies, resources, queues=None, running=(), low_watermark_s=900, now=NOW):
    running = tuple(sorted(running, key=lambda t: (t.placed_at, t.seq)))
    return Snapshot(
        now,
        tuple(pools),
        tuple(profiles),
        tuple(policies),
        tuple(resources),
        dict(queues or {}),
        running,
        low_watermark_s,
    )


def two_groups(capacity=4, res=(2, 2), lim=(4, 4), b_running=0, a_waiting=0, b_waiting=0, a_size=1):
    """Pool `onprem`, profile `gpu` (size_from_task), policies A and B, resources a and b."""
    s = snapshot(
        [pool("onprem", capacity, ["gpu"])],
        [profile("gpu", 1, ["onprem"], ["A", "B"], size_from_task=True)],
        [policy("A", res[0], lim[0]), policy("B", res[1], lim[1])],
        [cr("a", "A", "gpu"), cr("b", "B", "gpu")],
        {
            "a": tuple(waiting(f"a{i}", 100 + i, a_size) for i in range(a_waiting)),
            "b": tuple(waiting(f"bw{i}", 200 + i, 1) for i in range(b_waiting)),
        },
        [placed(f"b{i}", "b", "onprem", 1, i, ago_s=100 - i) for i in range(b_running)],
    )
    return s
