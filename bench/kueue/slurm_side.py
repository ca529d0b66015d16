"""Slurm's side of a run: the project's one-node dev cluster (``deploy/slurm-dev``) started and
stopped, the same tasks submitted as job arrays, and the wait for its queue to empty."""

import os
import shutil
import subprocess
import time
from pathlib import Path

from bench.kueue.measure import CpuMeter
from bench.kueue.probes import wait_until
from bench.kueue.shape import Shape

ROOT = Path(__file__).resolve().parents[2]
SLURM_DIR = Path("/tmp/klique-slurm-bench")


def start_slurm(shape: Shape) -> dict:
    gpus = shape.pool_gpus * shape.cohorts
    env = {**os.environ, "SLURM_DEV_GPUS": str(gpus), "SLURM_DEV_CPUS": str(gpus + 8)}
    subprocess.run([str(ROOT / "deploy/slurm-dev/stop.sh"), str(SLURM_DIR)], check=False, capture_output=True)
    shutil.rmtree(SLURM_DIR, ignore_errors=True)
    out = subprocess.run(
        [str(ROOT / "deploy/slurm-dev/start.sh"), str(SLURM_DIR)], env=env, capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(f"Slurm did not start: {out.stderr[-2000:]}")
    conf = out.stdout.strip().rsplit("SLURM_CONF=", 1)[1]
    return {**os.environ, "SLURM_CONF": conf}


def run_slurm(slurm_env: dict, work) -> dict:
    total = sum(len(tasks) for _, tasks in work)
    meter = CpuMeter({"slurm": {"slurmctld", "slurmd", "slurmstepd", "slurmdbd"}})

    def squeue_count() -> int:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], env=slurm_env, capture_output=True, text=True)
        return len(out.stdout.split()) if out.returncode == 0 else 1

    t0 = time.time()
    for name, tasks in work:
        groups: dict[tuple[int, float], int] = {}
        for task in tasks:
            groups[task] = groups.get(task, 0) + 1
        for (gpus, run), count in groups.items():
            subprocess.run(
                ["sbatch", "--parsable", "-J", name, f"--gres=gpu:{gpus}", f"--array=0-{count - 1}",
                 "-o", "/dev/null", "-e", "/dev/null", "--wrap", f"sleep {run:g}"],
                env=slurm_env, check=True, capture_output=True,
            )  # fmt: skip
    submitted = time.time()
    wait_until(lambda: squeue_count() == 0, 3600, "Slurm's queue to empty", every=0.2)
    makespan = time.time() - t0
    cpu = meter.done()
    return {
        "system": "slurm",
        "tasks": total,
        "makespan_s": round(makespan, 1),
        "submit_s": round(submitted - t0, 2),
        "cpu_s": cpu,
        "load_1m": round(os.getloadavg()[0], 2),
    }


def stop_slurm() -> None:
    subprocess.run([str(ROOT / "deploy/slurm-dev/stop.sh"), str(SLURM_DIR)], check=False)
