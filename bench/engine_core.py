"""Benchmark of the engine core: pass time on synthetic estates, and Kueue's baseline replayed.

    .venv/bin/python bench/engine_core.py                # the full set (about a minute)
    .venv/bin/python bench/engine_core.py --quick        # fewer passes, smaller estates only
    .venv/bin/python bench/engine_core.py --write-docs   # and put the tables into docs/benchmarks.md
    .venv/bin/python bench/engine_core.py --smoke        # the 1k estates, 3 passes, and Kueue's replay

Estates are shaped like the public Philly and Helios traces: 79% of tasks take 1 GPU, 5% 2,
10% 4, 5% 8 and 1% 16 to 64; runtimes are log-normal with a median of 10 minutes (sigma 1.5, a
heavy tail); groups are virtual clusters whose reservations sum to about 80% of capacity. Each
estate is run through the simulator on a closed loop (every completion submits a new task, so
waiting + running stays at the estate's size) and only `allocate()` is timed: the first pass
(cold: the estate arrives all at once) separately, then the steady passes, one per second.
Times are CPU time of the process (time.process_time) with the cyclic GC off around the call,
so that other load on a shared machine does not count; the wall-clock median is shown too.
Verdict materialisation (every waiting task's verdict) is timed apart from the pass.
The run exits 1 when an estate placed nothing or a Kueue replay left tasks unfinished.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import random
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from apps.engine.core import allocate  # noqa: E402
from apps.engine.core.scenario import parse  # noqa: E402
from apps.engine.core.scenario_model import Submit  # noqa: E402
from apps.engine.core.simulation import Simulation  # noqa: E402

TYPES = ("A100", "H100", "V100", "L4")
REGIONS = 5
SIZE_MIX = ((1, 79), (2, 5), (4, 10), (8, 5), (16, 0.5), (32, 0.3), (64, 0.2))


def task_size(rng: random.Random) -> int:
    sizes, weights = zip(*SIZE_MIX, strict=True)
    return rng.choices(sizes, weights)[0]


def runtime_s(rng: random.Random) -> int:
    return max(1, min(7 * 86400, round(math.exp(rng.gauss(math.log(600), 1.5)))))


def estate(
    tasks: int, policies: int, pools: int, running_share: float, seed: int = 1, fair: bool = False
) -> dict:
    """A scenario dict: `tasks` submitted at 0, with capacity for about running_share of them.
    `fair`: every department lends "fair", its teams weighted 1, 2 or 3."""
    rng = random.Random(seed)
    mean_size = sum(s * w for s, w in SIZE_MIX) / sum(w for _, w in SIZE_MIX)
    total = tasks * running_share * mean_size
    groups = len(TYPES) * REGIONS
    per_pool = max(8, round(total / pools / 8) * 8)
    pool_list = []
    for i in range(pools):
        big = i % 10 == 0
        pool_list.append(
            {
                "name": f"pool{i:03d}",
                "capacity": per_pool * (4 if big else 1),
                "gpu_type": TYPES[i % len(TYPES)],
            }
        )
    by_group: dict[int, list[str]] = {g: [] for g in range(groups)}
    for i, p in enumerate(pool_list):
        by_group[(i // len(TYPES)) % REGIONS * len(TYPES) + i % len(TYPES)].append(p["name"])
    profiles = []
    for t, gpu in enumerate(TYPES):
        for r in range(REGIONS):
            home = by_group[r * len(TYPES) + t]
            spill = by_group[(r + 1) % REGIONS * len(TYPES) + t]
            profiles.append(
                {
                    "name": f"{gpu}-r{r}",
                    "gpus": 1,
                    "size_from_task": True,
                    "time_weight": (2, 3, 1, 0.5)[t],
                    "pools": home + spill,
                }
            )
    capacity = sum(p["capacity"] for p in pool_list)
    flat = policies <= 100
    departments = 0 if flat else policies // 50
    leaves = policies - departments
    shares = [1 / (i + 1) ** 0.8 for i in range(leaves)]
    scale = 0.8 * capacity / sum(shares)
    pols, crs, leaf_names = [], [], []
    for d in range(departments):
        pols.append({"name": f"dept{d:02d}", "reservation": 0, "limit": 0})
    dept_res = [0] * departments
    for i in range(leaves):
        res = max(1, round(shares[i] * scale))
        name = f"vc{i:04d}"
        p = {"name": name, "reservation": res, "limit": min(capacity, max(res * 3, res + 64))}
        if departments:
            p["parent"] = f"dept{i % departments:02d}"
            dept_res[i % departments] += res
            if fair:
                p["over_quota_weight"] = 1 + i % 3
        pols.append(p)
        leaf_names.append(name)
        home = rng.randrange(REGIONS)
        for t in rng.sample(range(len(TYPES)), rng.choice((1, 2, 3))):
            crs.append({"name": f"{name}-{t}", "policy": name, "profile": f"{TYPES[t]}-r{home}"})
    for d in range(departments):
        pols[d]["limit"] = min(capacity, round(dept_res[d] * 1.5) + 64)
        if fair:
            pols[d]["lending"] = "fair"
    max_pool = {
        f["name"]: max(next(p["capacity"] for p in pool_list if p["name"] == n) for n in f["pools"])
        for f in profiles
    }
    profile_of = {c["name"]: c["profile"] for c in crs}
    weights = [shares[int(c["policy"][2:])] for c in crs]
    limits = {p["name"]: p["limit"] for p in pols}
    policy_of = {c["name"]: c["policy"] for c in crs}
    events = []
    for k, cr in enumerate(rng.choices([c["name"] for c in crs], weights, k=tasks)):
        size = min(task_size(rng), max_pool[profile_of[cr]], limits[policy_of[cr]])
        events.append(
            {"at": 0, "submit": {"id": f"t{k}", "resource": cr, "gpus": size, "duration_s": runtime_s(rng)}}
        )
    return {
        "start": "2025-01-06T00:00:00Z",
        "duration_s": 10**9,
        "pools": pool_list,
        "profiles": profiles,
        "policies": pols,
        "compute_resources": crs,
        "events": events,
    }


class TimedLoop(Simulation):
    """The simulator on a closed loop, timing `allocate()` alone."""

    def __init__(self, scenario: dict, seed: int):
        sc = parse(scenario)
        super().__init__(sc, 10**15)
        self.rng = random.Random(seed)
        self.resource_names = [r.name for r in sc.resources]
        self.sizes = {e.what.resource: [] for e in sc.events}
        for e in sc.events:
            self.sizes[e.what.resource].append(e.what.size)
        self.times: list[float] = []
        self.cpu: list[float] = []
        self.placed_counts: list[int] = []
        self.stopped_counts: list[int] = []
        self.verdict_s: float | None = None
        self.verdicts = 0
        self.new = 0

    def _complete(self, t):
        done = super()._complete(t)
        for line in self.lines:
            if line["event"] == "completed":
                self.new += 1
                cr = self.rng.choice(self.resource_names)
                size = self.rng.choice(self.sizes.get(cr) or [1])
                self._submit(Submit(f"n{self.new}", cr, size, runtime_s(self.rng), False), t)
        return done

    def _pass(self, t):
        snap = self.snapshot(t)
        gc.disable()
        c0, t0 = time.process_time(), time.perf_counter()
        d = allocate(snap)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        gc.enable()
        self.times.append(elapsed)
        self.cpu.append(cpu)
        self.placed_counts.append(len(d.placements))
        self.stopped_counts.append(len(d.preemptions))
        if self.verdict_s is None and len(self.times) == 3:
            t0 = time.process_time()
            self.verdicts = sum(1 for _ in d.verdicts())
            self.verdict_s = time.process_time() - t0
        self.apply(d, t)
        self.lines.clear()
        return bool(d.placements or d.preemptions)

    def run_passes(self, passes: int) -> None:
        t = 0
        while len(self.times) < passes + 1:
            self._roll_periods(t)
            self._complete(t)
            self._apply_events(t)
            self._pass(t)
            t += self.step


def measure(
    name: str, tasks: int, policies: int, pools: int, share: float, passes: int, fair: bool = False
) -> dict:
    loop = TimedLoop(estate(tasks, policies, pools, share, fair=fair), seed=7)
    loop.run_passes(passes)
    cpu = loop.cpu[1:]
    placed = loop.placed_counts[1:]
    ordered = sorted(cpu)
    return {
        "name": name,
        "tasks": tasks,
        "policies": policies,
        "pools": pools,
        "running": len(loop.placed),
        "waiting": sum(len(q) for q in loop.queues),
        "cold_ms": loop.cpu[0] * 1000,
        "cold_placed": loop.placed_counts[0],
        "median_ms": statistics.median(cpu) * 1000,
        "p99_ms": ordered[min(len(ordered) - 1, math.ceil(0.99 * len(ordered)) - 1)] * 1000,
        "wall_median_ms": statistics.median(loop.times[1:]) * 1000,
        "placed_per_pass": statistics.mean(placed),
        "placements_per_s": sum(placed) / sum(cpu) if sum(cpu) else 0,
        "verdicts": loop.verdicts,
        "verdict_ms": (loop.verdict_s or 0) * 1000,
        "stopped": loop.stopped_counts,
    }


KUEUE_TASKS = 15_000


def kueue(step: str, staggered: bool) -> dict:
    """Kueue's scheduler-perf baseline: 5 cohorts of 6 queues (nominal 20, borrowing limit 100)."""
    pools = [{"name": f"dept{d}", "capacity": 120} for d in range(5)]
    profiles = [
        {"name": f"dept{d}", "gpus": 1, "size_from_task": True, "pools": [f"dept{d}"]} for d in range(5)
    ]
    policies, crs, events = [], [], []
    classes = ((350, 1, "0.2", 100), (100, 5, "0.5", 500), (50, 20, "1", 1200))
    for d in range(5):
        for q in range(6):
            name = f"d{d}q{q}"
            policies.append({"name": name, "reservation": 20, "limit": 120})
            crs.append({"name": name, "policy": name, "profile": f"dept{d}"})
            for count, size, run, interval_ms in classes:
                for i in range(count):
                    at = i * interval_ms / 1000 if staggered else 0
                    events.append(
                        {
                            "at": at,
                            "submit": {
                                "id": f"{name}-{size}-{i}",
                                "resource": name,
                                "gpus": size,
                                "duration_s": float(run),
                            },
                        }
                    )
    scenario = {
        "start": "2025-01-06T00:00:00Z",
        "duration_s": 3600,
        "pass_interval_s": float(step),
        "pools": pools,
        "profiles": profiles,
        "policies": policies,
        "compute_resources": crs,
        "events": events,
    }
    sc = parse(json.loads(json.dumps(scenario), parse_float=Decimal))
    t0 = time.perf_counter()
    lines = list(Simulation(sc, sc.duration_us).run())
    wall = time.perf_counter() - t0
    done = [e["at"] for e in lines[:-1] if e["event"] == "completed"]
    return {
        "step": step,
        "staggered": staggered,
        "makespan_s": max(done),
        "completed": len(done),
        "preemptions": sum(1 for e in lines[:-1] if e["event"] == "preempted"),
        "wall_s": wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1k and 15k estates only, 10 steady passes")
    ap.add_argument("--passes", type=int, help="steady passes per estate (default 60, quick 10)")
    ap.add_argument("--no-kueue", action="store_true", help="skip the Kueue baseline replay")
    ap.add_argument("--write-docs", action="store_true", help="write the tables into docs/benchmarks.md")
    ap.add_argument("--smoke", action="store_true", help="1k estates only, 3 steady passes")
    ap.add_argument(
        "--fair-settle",
        type=int,
        metavar="TASKS",
        help="the fair estate of TASKS tasks held still (no completions): placements and stops per pass",
    )
    ap.add_argument(
        "--phases",
        type=int,
        metavar="TASKS",
        help="CPU time of each phase of one pass after --passes steady ones, 2,000 policies, plain and fair",
    )
    ap.add_argument(
        "--fair-compare",
        type=int,
        metavar="TASKS",
        help="only the 2,000-policy estate of TASKS tasks, without and with fair sharing, side by side",
    )
    args = ap.parse_args()
    if args.smoke and args.write_docs:
        ap.error("--smoke figures do not go into the docs")
    passes = args.passes or (3 if args.smoke else 10 if args.quick else 60)
    if args.fair_compare or args.fair_settle or args.phases:
        import engine_fair  # the fair-sharing measures, beside this module

        engine_fair.run(args, passes)
        return
    sizes = (1_000,) if args.smoke else (1_000, 15_000) if args.quick else (1_000, 15_000, 60_000)
    lines: list[str] = []
    print_line = _collecting(lines)
    print_line(f"Machine: {machine()}; {passes} steady passes per estate.")
    print_line("\n" + HEADER + "\n" + "|---" * (HEADER.count("|") - 1) + "|")
    idle = []
    for tasks in sizes:
        for policies in (30, 2000):
            runs = [measure(f"{tasks // 1000}k", tasks, policies, 200, 0.35, passes)]
            if policies > 100:  # departments over teams: fair sharing on every department
                runs.append(measure(f"{tasks // 1000}k, fair", tasks, policies, 200, 0.35, passes, fair=True))
            for r in runs:
                print_line(row(r))
                if not r["cold_placed"]:
                    idle.append(f"{r['name']} estate, {policies} policies: nothing placed")
    if not (args.quick or args.smoke):
        # The same capacity and policies, pools full: 100k waiting, then 10k for comparison.
        print_line(row(measure("full", 110_500, 2000, 200, 0.05, passes)))
        print_line(row(measure("full, 10k waiting", 20_000, 2000, 200, 0.265, passes)))
    if not args.no_kueue:
        print_line("\n| Kueue baseline | step | makespan | completed | preemptions | wall |")
        print_line("|---|---|---|---|---|---|")
        for staggered in (False, True):
            for step in ("1", "0.1"):
                k = kueue(step, staggered)
                if k["completed"] != KUEUE_TASKS:
                    idle.append(f"Kueue replay, step {step} s: {k['completed']} of {KUEUE_TASKS} completed")
                label = "Kueue's creation intervals" if staggered else "all submitted at 0"
                print_line(
                    f"| {label} | {k['step']} s | {k['makespan_s']} s | {k['completed']} "
                    f"| {k['preemptions']} | {k['wall_s']:.1f} s |"
                )
        print_line("| Kueue (published, rangespec average) | - | 351 s | 15000 | - | - |")
        print_line("| ideal (7,920 GPU-s per 120-GPU cohort) | - | 66 s | 15000 | - | - |")
    if args.write_docs:
        command = "python bench/engine_core.py " + " ".join(sys.argv[1:])
        write_docs(command.strip(), lines)
        print(f"\nwritten into {DOCS.relative_to(ROOT)}")
    if idle:
        sys.exit("did not do its work: " + "; ".join(idle))


DOCS = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
ROOT = DOCS.parents[1]
BEGIN, END = (
    "<!-- engine_core: begin (written by bench/engine_core.py --write-docs) -->",
    "<!-- engine_core: end -->",
)


def _collecting(lines: list[str]):
    def print_line(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    return print_line


def machine() -> str:
    """The processor, cores, Python and load, as far as this machine tells."""
    model = ""
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    python = platform.python_version()
    return f"{model}, {os.cpu_count()} cores, Python {python}, 1-minute load {load:.2f} at start"


def write_docs(command: str, lines: list[str]) -> None:
    """Replace the figures between the markers in docs/benchmarks.md (the prose around stays)."""
    import datetime
    import subprocess

    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    block = "\n".join([BEGIN, f"Command: `{command}`, at commit `{commit}`, {when}.", "", *lines, END])
    text = DOCS.read_text()
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        text = head + block + rest.split(END, 1)[1]
    else:
        text = text.replace("## Engine core\n", "## Engine core\n\n" + block + "\n", 1)
    DOCS.write_text(text)


HEADER = (
    "| estate | policies | pools | running | waiting | cold pass (placed) | pass median | pass p99 "
    "| wall median | placed/pass | placements/s | verdicts: n, time |"
)


def row(r: dict) -> str:
    return (
        f"| {r['name']} | {r['policies']} | {r['pools']} | {r['running']} | {r['waiting']} "
        f"| {r['cold_ms']:.0f} ms ({r['cold_placed']}) | {r['median_ms']:.1f} ms | {r['p99_ms']:.1f} ms "
        f"| {r['wall_median_ms']:.1f} ms | {r['placed_per_pass']:.1f} | {r['placements_per_s']:.0f} "
        f"| {r['verdicts']}, {r['verdict_ms']:.0f} ms |"
    )


if __name__ == "__main__":
    main()
