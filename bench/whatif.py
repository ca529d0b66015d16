"""Benchmark of the what-if comparison (apps/engine/core/whatif.py) on a month of demand.

    .venv/bin/python bench/whatif.py                      # 30 days, 300,000 tasks, 2 processes
    .venv/bin/python bench/whatif.py --days 7 --tasks 70000 --processes 1
    .venv/bin/python bench/whatif.py --smoke              # 1 day, 2,000 tasks

The estate is bench/engine_core.py's (`estate()`: Philly/Helios-shaped sizes and log-normal
runtimes, 30 groups whose reservations sum to about 80% of capacity, 40 pools), with the tasks
submitted at uniformly random times over the period instead of all at 0, and pools sized by
`estate()` for the GPU-time asked at 85% (its rounding to 8-GPU pools gives 832 GPUs for the
default month: about 59% used overall, unevenly, since groups are tied to regions: some pools run
full, others nearly idle). The changes: the largest group gets 16 GPUs more reservation and
the first pool 16 GPUs more capacity. Prints the wall time of `compare()` (parse, both runs and
the figures) and the headline figures; exits 1 when a side completed no task.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.engine.core.whatif import compare  # noqa: E402
from bench.engine_core import SIZE_MIX, estate, machine  # noqa: E402

MEAN_SIZE = sum(s * w for s, w in SIZE_MIX) / sum(w for _, w in SIZE_MIX)
MEAN_RUNTIME_S = 1850  # the log-normal's mean (median 600 s, sigma 1.5, capped at 7 days)


def month(days: float, tasks: int, load: float = 0.85, step_s: int = 10, seed: int = 1) -> dict:
    """A scenario dict: `tasks` over `days`, capacity for the demand at `load`."""
    seconds = round(days * 86400)
    gpus = tasks * MEAN_SIZE * MEAN_RUNTIME_S / seconds / load
    sc = estate(tasks, 30, 40, gpus / tasks / MEAN_SIZE, seed=seed)
    rng = random.Random(seed + 1)
    times = sorted(rng.randrange(seconds) for _ in range(tasks))
    for e, at in zip(sc["events"], times, strict=True):
        e["at"] = at
    sc["duration_s"] = seconds
    sc["pass_interval_s"] = step_s
    return sc


def _cpu() -> float:
    """User and system CPU seconds of this process and its finished children."""
    return sum(
        r.ru_utime + r.ru_stime
        for r in map(resource.getrusage, (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--days", type=float, help="default 30 (smoke 1)")
    ap.add_argument("--tasks", type=int, help="default 300,000 (smoke 2,000)")
    ap.add_argument("--step", type=int, default=10, help="pass_interval_s (default 10)")
    ap.add_argument("--processes", type=int, default=2, help="1: the two runs one after the other")
    ap.add_argument("--json", metavar="FILE", help="write the report there")
    ap.add_argument("--smoke", action="store_true", help="1 day and 2,000 tasks unless given")
    args = ap.parse_args()
    args.days = args.days or (1 if args.smoke else 30)
    args.tasks = args.tasks or (2_000 if args.smoke else 300_000)
    sc = month(args.days, args.tasks, step_s=args.step)
    biggest = sc["policies"][0]["name"]
    changes = {
        "reservations": {biggest: sc["policies"][0]["reservation"] + 16},
        "capacities": {sc["pools"][0]["name"]: sc["pools"][0]["capacity"] + 16},
    }
    capacity = sum(p["capacity"] for p in sc["pools"])
    print(f"Machine: {machine()}; os.cpu_count() {os.cpu_count()}")
    print(
        f"{args.days:g} days, {args.tasks} tasks, {capacity} GPUs in {len(sc['pools'])} pools, "
        f"{len(sc['policies'])} groups, pass interval {args.step} s, {args.processes} process(es)"
    )
    cpu0 = _cpu()
    t0 = time.perf_counter()
    print(f"1-minute load before compare(): {os.getloadavg()[0]:.2f}")
    report = compare(sc, changes, processes=args.processes)
    wall = time.perf_counter() - t0
    cpu = _cpu() - cpu0
    print(f"compare(): {wall:.1f} s wall, {cpu:.1f} s CPU (this process and its children)")
    for side in ("base", "changed"):
        g = report[side]["groups"][biggest]
        print(
            f"  {side}: {biggest} wait median {g['wait_median_s']} s, p95 {g['wait_p95_s']} s; "
            f"tasks {report[side]['tasks']}; preemptions {report[side]['preemptions']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if not all(report[side]["tasks"].get("completed") for side in ("base", "changed")):
        sys.exit("a side completed no task")


if __name__ == "__main__":
    main()
