"""Fair sharing's measures for bench/engine_core.py (issue 34): `--fair-compare TASKS` (the
2,000-policy estate without and with fair sharing on every department, side by side),
`--fair-settle TASKS` (the fair estate held still: placements and stops per pass) and
`--phases TASKS` (CPU time of each phase of one pass, plain and fair). Run through engine_core.py:

    .venv/bin/python bench/engine_core.py --fair-compare 60000 --passes 30
"""

from __future__ import annotations

import gc
import os
import time

from engine_core import HEADER, TimedLoop, estate, machine, measure, row

from apps.engine.core import allocate
from apps.engine.core.scenario import parse
from apps.engine.core.simulation import Simulation


def run(args, passes: int) -> None:
    if args.fair_compare:
        fair_compare(args.fair_compare, passes)
    if args.fair_settle:
        fair_settle(args.fair_settle, passes)
    if args.phases:
        for fair in (False, True):
            phases(args.phases, passes, fair)


def phases(tasks: int, passes: int, fair: bool) -> None:
    """CPU time of each phase of `allocate()`, run by hand in its order, on the snapshot after
    `passes` steady passes; three times, to show the spread."""
    from apps.engine.core.allocator import _Pass
    from apps.engine.core.pass_state import FILL, LEND

    loop = TimedLoop(estate(tasks, 2000, 200, 0.35, fair=fair), seed=7)
    loop.run_passes(passes)
    snap = loop.snapshot(loop.step * (len(loop.cpu) + 1))
    for _ in range(3):
        spent: dict[str, float] = {}

        def timed(name, step, *args, spent=spent):
            gc.disable()
            t0 = time.process_time()
            step(*args)
            spent[name] = spent.get(name, 0) + (time.process_time() - t0) * 1000
            gc.enable()

        run = _Pass(snap)
        timed("budget stops", run._budget_stops)
        run.occ_start = list(run.occ)
        timed("starvation", run._hold_starving)
        timed("fill", run._fill_or_lend, FILL)
        stops = len(run.preemptions)
        timed("reclaim", run._reclaim_phase)
        if run.fair_parents:
            if len(run.preemptions) > stops:
                timed("fill", run._fill_or_lend, FILL)
                stops = len(run.preemptions)
            timed("fair split", run._fair_split)
            timed("fair lend", run._fill_or_lend, LEND, True)
            timed("fair reclaim", run._fair_reclaim_phase)
        timed("priority", run._priority_phase)
        if len(run.preemptions) > stops:
            timed("fill", run._fill_or_lend, FILL)
        timed("lend", run._fill_or_lend, LEND)
        parts = ", ".join(f"{name} {ms:.1f}" for name, ms in spent.items())
        print(f"{'fair' if fair else 'plain'}: {parts}; phases {sum(spent.values()):.1f} ms (ms of CPU)")


def fair_settle(tasks: int, passes: int) -> None:
    """The fair estate with every task submitted at 0 and none ending: how many placements and
    stops each pass makes, until it makes none (fair sharing settling)."""
    sim = Simulation(parse(estate(tasks, 2000, 200, 0.35, fair=True)), 10**15)
    sim._apply_events(0)
    for n in range(passes):
        d = allocate(sim.snapshot(n * sim.step))
        sim.apply(d, n * sim.step)
        sim.lines.clear()
        reasons = [p.reason for p in d.preemptions]
        print(
            f"pass {n}: placed {len(d.placements)}, reclaim {reasons.count('reclaim')}, "
            f"fair_share {reasons.count('fair_share')}"
        )
        if not d.placements and not d.preemptions:
            break


def fair_compare(tasks: int, passes: int) -> None:
    """The same estate with lending "priority" and "fair" on every department, measured one after
    the other, so that the ratio holds on a shared machine; the load average is printed."""
    print(f"Machine: {machine()}; {passes} steady passes per estate; load {os.getloadavg()[0]:.1f}.")
    print("\n" + HEADER + "\n" + "|---" * (HEADER.count("|") - 1) + "|")
    plain = measure(f"{tasks // 1000}k", tasks, 2000, 200, 0.35, passes)
    print(row(plain))
    fair = measure(f"{tasks // 1000}k, fair", tasks, 2000, 200, 0.35, passes, fair=True)
    print(row(fair))
    print(
        f"\nfair / priority, pass median: {fair['median_ms'] / plain['median_ms']:.2f}; "
        f"load after: {os.getloadavg()[0]:.1f}"
    )
    for r in (plain, fair):
        print(f"{r['name']}: work stopped per pass: {r['stopped']}")
