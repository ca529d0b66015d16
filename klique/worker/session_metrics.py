"""What the daemon measures of a session server for the control plane's idle limits, gathered
by ``Session.sample`` (sessions.py); ``None`` means "not known here", never "idle":

- ``cpu_percent``: the CPU time of the server's processes over the sample interval (its session,
  as in ``setsid``, and every descendant of its first process), and of their children that ended
  and were waited for in between; 100 = one core busy;
- ``gpu_util``: NVML's utilisation of the task's GPUs (their mean); None without GPUs or NVML;
- ``connections``: ESTABLISHED TCP connections to the session's port on this host;
- ``net_bytes``: None in process mode (a process's traffic is not counted apart on a shared
  network namespace);
- ``last_activity``: a Jupyter server's own (``api/status``), None for the port kind.
"""

import os
import time
from pathlib import Path

import psutil

TCP_ESTABLISHED = "01"


def session_processes(root_pid: int) -> list[psutil.Process]:
    """The server's processes: those of its session (``setsid``, which process mode gives every
    task), and every descendant of its first process (a Jupyter kernel gets a session of its own)."""
    found: dict[int, psutil.Process] = {}
    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == root_pid:
                found[process.pid] = process
        except OSError:
            continue
    try:
        root = psutil.Process(root_pid)
        for process in [root, *root.children(recursive=True)]:
            found.setdefault(process.pid, process)
    except psutil.Error:
        pass
    return list(found.values())


class CpuMeter:
    """CPU use of a changing set of processes between two samples: the CPU seconds they used
    (user + system), and those of their children that ended and were waited for in between (a
    shell loop of short jobs, a kernel calling subprocesses: never alive at a sample), over the
    wall seconds between the samples, in percent (100 = one core)."""

    def __init__(self, clock=time.monotonic):
        self.clock = clock
        # (pid, create time) -> (its own CPU seconds, its waited-for children's)
        self.seen: dict[tuple[int, float], tuple[float, float]] = {}
        self.at: float | None = None

    def sample(self, processes: list[psutil.Process]) -> float | None:
        """The CPU percent since the last sample; None on the first."""
        now, used, waited, seen = self.clock(), 0.0, 0.0, {}
        for process in processes:
            try:
                with process.oneshot():
                    key = (process.pid, process.create_time())
                    times = process.cpu_times()
            except psutil.Error:
                continue
            seen[key] = (times.user + times.system, times.children_user + times.children_system)
            # A process started since the last sample counts from zero; one seen before, from then.
            own, children = self.seen.get(key, (0.0, 0.0))
            used += seen[key][0] - own
            waited += seen[key][1] - children
        # A process counted at the last sample that has ended since is in its parent's children
        # times whole: what was counted of it then is not counted again.
        counted = sum(sum(times) for key, times in self.seen.items() if key not in seen and not _alive(key))
        used += max(0.0, waited - counted)
        previous, self.seen, self.at = self.at, seen, now
        if previous is None or now <= previous:
            return None
        return round(max(0.0, used) / (now - previous) * 100, 1)


def _alive(key: tuple[int, float]) -> bool:
    """Whether the process (pid, create time) still runs (left the session's tree, say)."""
    try:
        return psutil.Process(key[0]).create_time() == key[1]
    except psutil.Error:
        return False


def established(port: int, proc: Path = Path("/proc/net")) -> int | None:
    """ESTABLISHED TCP connections whose local port is ``port`` (clients of the server), from
    ``/proc/net/tcp`` and ``tcp6``; through psutil where there is no ``/proc``; None when unknown."""
    tables = [proc / "tcp", proc / "tcp6"]
    if not any(table.exists() for table in tables):
        try:
            return sum(
                1
                for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_ESTABLISHED and c.laddr and c.laddr.port == port
            )
        except (psutil.Error, OSError):
            return None
    count = 0
    for table in tables:
        try:
            lines = table.read_text().splitlines()[1:]
        except OSError:
            continue
        count += count_established(lines, port)
    return count


def count_established(lines: list[str], port: int) -> int:
    """Rows of a ``/proc/net/tcp`` table (``sl local_address rem_address st ...``) in state
    ESTABLISHED whose local port is ``port``."""
    count = 0
    for line in lines:
        columns = line.split()
        if len(columns) < 4 or columns[3] != TCP_ESTABLISHED:
            continue
        try:
            local_port = int(columns[1].rsplit(":", 1)[1], 16)
        except (IndexError, ValueError):
            continue
        count += local_port == port
    return count


def gpu_utilisation(nvml, devices: list[str]) -> float | None:
    """The mean NVML utilisation (percent) of ``devices`` (NVML UUIDs or indexes); None without
    devices, without NVML, or when NVML does not answer for them: never a made-up 0."""
    if nvml is None or not devices:
        return None
    stats = {entry["index"]: entry["utilization_pct"] for entry in nvml.stats()}
    if not stats:
        return None
    try:
        by_uuid = {gpu.uuid: gpu.index for gpu in nvml.gpus()}
    except Exception:  # NVML failing after start: unknown, not idle
        by_uuid = {}
    indexes = [by_uuid.get(d, int(d) if d.isdigit() else None) for d in devices]
    found = [stats[i] for i in indexes if i in stats]
    if len(found) != len(devices):
        return None
    return round(sum(found) / len(found), 1)
