"""Where a Kueue replay's GPU-seconds went, from the task times ``kueue_replay.py --keep`` writes
(``tasks.csv`` in the kept folder): running, placed but not yet started, and free, over the whole
run and over the phase of the 20-GPU tasks; each size's lags (placed to claimed, claimed to
started) and its phase; and, in the 20-GPU phase, how long after a task's end the next was placed.

    .venv/bin/python bench/kueue_timeline.py /tmp/klique-kueue-XXXX/tasks.csv [--gpus 120]

Only each task's last placement is in its row: a preempted task's earlier runs are not counted."""

import argparse
import bisect
import csv
import statistics


def _f(value: str) -> float | None:
    return float(value) if value else None


def _events(rows) -> list[tuple[float, str, float]]:
    events = []
    for row in rows:
        gpus, placed, started, ended = (_f(row[k]) for k in ("gpus", "placed_at", "started_at", "ended_at"))
        if placed is None or ended is None:
            continue
        if started is None:
            events += [(placed, "held", gpus), (ended, "held", -gpus)]
        else:
            events += [
                (placed, "held", gpus),
                (started, "held", -gpus),
                (started, "run", gpus),
                (ended, "run", -gpus),
            ]
    return sorted(events)


def shares(events, capacity: float, start: float) -> dict[str, float]:
    """GPU-seconds running, placed-not-started and free from ``start`` to the last event."""
    running = held = 0.0
    last, spent = start, {"running": 0.0, "placed, not started": 0.0, "free": 0.0}
    for at, kind, gpus in events:
        if at > last:
            span = at - last
            spent["running"] += running * span
            spent["placed, not started"] += held * span
            spent["free"] += (capacity - running - held) * span
            last = at
        if kind == "run":
            running += gpus
        else:
            held += gpus
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks_csv")
    parser.add_argument("--gpus", type=float, default=120, help="the pool's GPUs (the baseline's 120)")
    args = parser.parse_args()
    with open(args.tasks_csv) as source:
        rows = list(csv.DictReader(source))
    t0 = min(_f(r["submitted_at"]) for r in rows)
    events = _events(rows)
    whole = shares(events, args.gpus, t0)
    total = sum(whole.values())
    print(f"makespan {(max(_f(r['ended_at']) or 0 for r in rows) - t0):.1f} s; GPU-seconds:")
    print("  " + ", ".join(f"{k} {v:.0f} ({v / total:.0%})" for k, v in whole.items()))
    for size in sorted({float(r["gpus"]) for r in rows}):
        ran = [r for r in rows if float(r["gpus"]) == size and r["started_at"] and r["ended_at"]]
        if not ran:
            continue
        claim = statistics.median(_f(r["claimed_at"]) - _f(r["placed_at"]) for r in ran)
        start = statistics.median(_f(r["started_at"]) - _f(r["claimed_at"]) for r in ran)
        first = min(_f(r["started_at"]) for r in ran) - t0
        end = max(_f(r["ended_at"]) for r in ran) - t0
        print(
            f"{size:g} GPU: {len(ran)} tasks, placed->claimed p50 {claim:.3f} s, claimed->started p50"
            f" {start:.3f} s, phase {first:.1f}-{end:.1f} s"
        )
    big = [r for r in rows if float(r["gpus"]) == 20 and r["started_at"] and r["ended_at"]]
    if big:
        placed = sorted(_f(r["placed_at"]) for r in big)
        gaps = []
        for end in sorted(_f(r["ended_at"]) for r in big):
            i = bisect.bisect_left(placed, end)
            if i < len(placed):
                gaps.append(placed[i] - end)
        phase = shares(events, args.gpus, min(_f(r["started_at"]) for r in big))
        part = sum(phase.values())
        print(f"20-GPU phase: end -> next placement p50 {statistics.median(gaps):.3f} s; GPU-seconds:")
        print("  " + ", ".join(f"{k} {v / part:.0%}" for k, v in phase.items()))


if __name__ == "__main__":
    main()
