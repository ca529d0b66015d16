"""How closely the simulator's replay of an exported period (``apps.engine.export``) matches the
record (docs/whatif.md, "Fidelity"). Reads only."""

from __future__ import annotations

from decimal import Decimal

from apps.core.gpus import to_milli
from apps.engine.core import scenario as scenarios
from apps.engine.core.scenario_model import Submit
from apps.engine.core.simulation import Simulation
from apps.engine.export import US, dumps
from apps.engine.export_tasks import database_ids
from apps.ledger.models import UsageInterval
from apps.tasks.models import TaskEvent

ENDS = ("preempted", "completed", "canceled", "stopped", "timed_out")  # a replayed task's run ends


def fidelity(data: dict) -> dict:
    """Replay an export unchanged in the simulator and compare it with the record: the share of
    its tasks placed within one pass (``pass_interval_s``, 1 s) of their recorded placement (first
    placement in the period; never placed in both counts as a match), and the GPU-hours of the
    tasks inside the period, recorded (usage intervals) and replayed."""
    sc = scenarios.loads(dumps(data))
    start, end = sc.start, sc.start + sc.duration_us * US
    sizes = {e.what.id: e.what.size for e in sc.events if isinstance(e.what, Submit)}
    replayed_at: dict[str, Decimal] = {}
    running: dict[str, Decimal] = {}
    replayed_ms = Decimal(0)  # milli-GPU-seconds
    for line in Simulation(sc, sc.duration_us).run():
        task, at = line.get("task"), Decimal(str(line.get("at", 0)))
        if at * 1_000_000 >= sc.duration_us:
            break  # the step at the period's end belongs to the next period
        if line.get("event") == "placed":
            replayed_at.setdefault(task, at)
            running[task] = at
        elif task in running and line.get("event") in ENDS:
            replayed_ms += sizes[task] * (min(at, Decimal(sc.duration_us) / 1_000_000) - running.pop(task))
    for task, at in running.items():
        replayed_ms += sizes[task] * (Decimal(sc.duration_us) / 1_000_000 - at)

    db_ids = database_ids(sizes, start)
    sizes = {task: size for task, size in sizes.items() if task in db_ids}
    exported = {pk: task for task, pk in db_ids.items()}
    ids = list(exported)
    recorded_at: dict[str, Decimal] = {}
    placed = TaskEvent.objects.filter(task_id__in=ids, kind=TaskEvent.Kind.PLACED, at__gte=start, at__lt=end)
    for task_id, at in placed.order_by("at", "pk").values_list("task_id", "at"):
        recorded_at.setdefault(exported[task_id], Decimal((at - start) // US) / 1_000_000)
    recorded_ms = Decimal(0)
    intervals = UsageInterval.objects.filter(task_id__in=ids, start__lt=end).exclude(end__lte=start)
    for task_id, gpus, i_start, i_end in intervals.values_list("task_id", "gpus", "start", "end"):
        if i_start < start:
            recorded_at.setdefault(exported[task_id], Decimal(0))
        span = min(i_end or end, end) - max(i_start, start)
        recorded_ms += to_milli(gpus) * Decimal(span // US) / 1_000_000
    step = Decimal(sc.step_us) / 1_000_000
    within = sum(
        1
        for task in sizes
        if (task in recorded_at) == (task in replayed_at)
        and (task not in recorded_at or abs(recorded_at[task] - replayed_at[task]) <= step)
    )
    recorded, replayed = recorded_ms / 3_600_000, replayed_ms / 3_600_000
    difference = round(float((replayed - recorded) / recorded * 100), 2) + 0.0 if recorded else 0.0
    return {
        "tasks": len(sizes),
        "within_one_pass": within,
        "within_one_pass_share": round(within / len(sizes), 4) if sizes else 1.0,
        "recorded_gpu_hours": round(float(recorded), 3),
        "replayed_gpu_hours": round(float(replayed), 3),
        "gpu_hours_difference_pct": difference,
    }
