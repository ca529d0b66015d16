"""Benchmark of money budgets in the engine core (issue 37): the pass on the snapshots of
`engine_core`'s closed-loop estates, as they are and with a money window on every policy.

    .venv/bin/python bench/engine_money.py            # 1k/30, 15k/2000 and 15k/2000 fair
    .venv/bin/python bench/engine_money.py --smoke    # 1k/30 only, 5 passes
    .venv/bin/python bench/engine_money.py --save S   # also pickle the snapshots to S (to time
                                                      # another tree's allocate() on the same ones)

Each estate runs `--passes` steady passes in the simulator; each snapshot is then allocated 3 times
as it is ("none") and with one money window on each policy (2.50 a GPU-hour on every pool, nothing
used, never used up: every start check and rate update runs, no stop). CPU time, GC off around the
call; medians in ms.
"""

from __future__ import annotations

import argparse
import gc
import pickle
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import engine_core  # noqa: E402

from apps.engine.core import Budget, allocate, money_to_units  # noqa: E402

ESTATES = (("1k/30", 1000, 30, False), ("15k/2000", 15000, 2000, False), ("15k/2000 fair", 15000, 2000, True))


def snapshots(tasks: int, policies: int, fair: bool, passes: int) -> list:
    got = []

    class Capture(engine_core.TimedLoop):
        def snapshot(self, t):
            s = super().snapshot(t)
            got.append(s)
            return s

    Capture(engine_core.estate(tasks, policies, 200, 0.35, fair=fair), seed=7).run_passes(passes)
    return got[1:]  # the cold pass apart


def with_money(s):
    rates = {p.id: 2_500_000 for p in s.pools}  # one mapping for all, as the loaders give it
    window = Budget(money_to_units(10**9), "month", 0, rates, "EUR")
    return replace(s, policies=tuple(replace(p, budgets=(*p.budgets, window)) for p in s.policies))


def median_ms(snaps: list) -> float:
    cpu = []
    for s in snaps:
        for _ in range(3):
            gc.disable()
            t = time.process_time()
            allocate(s)
            cpu.append(time.process_time() - t)
            gc.enable()
    return statistics.median(cpu) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--passes", type=int, default=20)
    ap.add_argument("--save", metavar="FILE")
    args = ap.parse_args()
    estates = ESTATES[:1] if args.smoke else ESTATES
    passes = 5 if args.smoke else args.passes
    print(f"Machine: {engine_core.machine()}; {passes} steady passes each.")
    print("| estate | no money window, ms | a money window on every policy, ms |\n|---|---|---|")
    saved = {}
    for name, tasks, policies, fair in estates:
        snaps = snapshots(tasks, policies, fair, passes)
        saved[name] = snaps
        print(f"| {name} | {median_ms(snaps):.2f} | {median_ms([with_money(s) for s in snaps]):.2f} |")
    if args.save:
        with open(args.save, "wb") as f:
            pickle.dump(saved, f)


if __name__ == "__main__":
    main()
