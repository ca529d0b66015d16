"""Benchmark: what reached cloud spend caps cost one engine pass.

An estate of 2,000 policies on 200 pools (one profile listing them all, one task waiting) is
decided with an organisation cap closing 0, 5, 20 and 200 of its pools to every policy. The pass
should cost about the same whatever the number of capped pools (a cap is one set of policies
shared by its pools, not a pools x policies table). The waiting task must be placed in every case
but the last (all pools capped), where it must wait: otherwise the run exits 1.

    .venv/bin/python bench/engine_caps.py            # best of 7 passes per case, CPU time
    .venv/bin/python bench/engine_caps.py --smoke    # 2 passes per case
"""

import argparse
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "engine"))

from engine_helpers import cr, policy, pool, profile, snapshot, waiting  # noqa: E402

from apps.engine.core import SpendCap, allocate  # noqa: E402

POLICIES, POOLS, RUNS = 2000, 200, 7
RESETS = datetime(2025, 2, 1, tzinfo=UTC)


def estate():
    pools = [pool(f"p{i}", 8, ["gpu"]) for i in range(POOLS)]
    policies = [policy(f"A{i}", 0, 8) for i in range(POLICIES)]
    resources = [cr(f"c{i}", f"A{i}", "gpu") for i in range(POLICIES)]
    gpu = profile("gpu", 1, [p.id for p in pools], [p.id for p in policies], size_from_task=True)
    return snapshot(pools, [gpu], policies, resources, {"c0": (waiting("w", 1, 1),)}), pools, policies


def best_pass(s, runs: int) -> tuple[float, int]:
    """The fastest of ``runs`` passes in ms, and the tasks the pass placed."""
    times = []
    for _ in range(runs):
        start = time.process_time()
        decisions = allocate(s)
        times.append(time.process_time() - start)
    return min(times) * 1000, len(decisions.placements)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2 passes per case")
    args = parser.parse_args()
    runs = 2 if args.smoke else RUNS
    s, pools, policies = estate()
    everyone = frozenset(p.id for p in policies)
    wrong = []
    for capped in (0, 5, 20, POOLS):
        caps = () if not capped else (SpendCap("org", tuple(p.id for p in pools[:capped]), everyone, RESETS),)
        ms, placed = best_pass(replace(s, caps=caps), runs)
        print(f"capped pools {capped:4d}: pass {ms:.1f} ms, placed {placed}")
        if placed != (0 if capped == POOLS else 1):
            wrong.append(capped)
    if wrong:
        sys.exit(f"capped pools {wrong}: the waiting task placed where it must wait, or the reverse")


if __name__ == "__main__":
    main()
