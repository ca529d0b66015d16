"""What a run measures beside its makespan: CPU seconds per process group and of the whole machine
(from /proc), the percentiles of the tasks' own lags, the medians over runs, and the bench's own CPU."""

import os
import statistics
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, str, float] | None:
    """(parent pid, command, CPU seconds of the process and its reaped children)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw.rsplit(")", 1)[1].split()
    return int(fields[1]), comm, sum(int(v) for v in fields[11:15]) / TICK


def processes() -> dict[int, tuple[int, str, float]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _stat(int(entry))):
            found[int(entry)] = info
    return found


def tree_cpu(procs, roots) -> float:
    """CPU seconds of the processes under ``roots`` (live ones and those they reaped)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, stack, seen = 0.0, [r for r in roots if r in procs], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += procs[pid][2]
        stack += children.get(pid, [])
    return total


def by_command(procs, names) -> list[int]:
    return [pid for pid, (_, comm, _) in procs.items() if comm in names]


def machine_busy_s() -> float:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / TICK


class CpuMeter:
    """CPU seconds per group over a run; groups are root pids or command names."""

    def __init__(self, groups: dict[str, list[int] | set[str]]):
        self.groups = groups
        self.before = self.sample()

    def sample(self) -> dict[str, float]:
        procs = processes()
        out = {}
        for name, spec in self.groups.items():
            roots = by_command(procs, spec) if isinstance(spec, set) else spec
            out[name] = tree_cpu(procs, roots)
        out["machine"] = machine_busy_s()
        return out

    def done(self) -> dict[str, float]:
        after = self.sample()
        return {name: round(after[name] - self.before.get(name, 0.0), 1) for name in after}


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    values = sorted(values)

    def at(q):
        return round(values[min(len(values) - 1, round(q * (len(values) - 1)))], 3)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}


def median_of(results: list[dict], key: str):
    values = [r[key] for r in results if r.get(key) is not None]
    return round(statistics.median(values), 2) if values else None


def self_cpu() -> float:
    usage = os.times()
    return usage.user + usage.system
