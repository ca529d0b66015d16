"""End to end on Kueue's scheduler tests: the whole live path (public API, engine, real
``klique-worker`` daemons running real processes), on the baseline beside a real one-node Slurm doing
the same work, and on Kueue's large-scale shape.

    .venv/bin/python bench/kueue_replay.py [--cohorts 1|5] [--engine loop|celery] [--runs 3] [--slurm]
    .venv/bin/python bench/kueue_replay.py --shape large [--scale 0.05] [--runs 1]
    .venv/bin/python bench/kueue_replay.py --smoke [--shape large] [--database URL] [--redis URL]

The baseline (``--shape baseline``, Kueue's ``test/performance/scheduler`` baseline): per cohort
one pool of 120 GPUs and 6 policies of reservation 20 and limit 120 (Kueue's nominal quota 20 plus
borrowing limit 100); per policy 350 tasks of 1 GPU for 0.2 s, 100 of 5 GPUs for 0.5 s and 50 of 20
GPUs for 1 s, all submitted at once (3,000 tasks per cohort). The quota-bound ideal is 66 s: each
cohort's 7,920 GPU-seconds on its 120 GPUs.

The large shape (``--shape large``): Kueue's large-scale scheduler test as first proposed in
kubernetes-sigs/kueue pull request 10780 (commit 8a23a93, "60k workloads and 2k cluster queues",
``test/performance/scheduler/configs/large-scale/generator.yaml``): 20 cohorts of 100 cluster
queues, each queue with nominal quota 20 and borrowing limit 100, and per queue 20 workloads of 1
unit for 200 ms, 7 of 5 units for 500 ms and 3 of 20 units for 1,000 ms (the baseline's classes
and run times at 30 workloads a queue): 2,000 queues, 60,000 workloads. Later commits of that pull
request cut the run times (to 100/250/500 ms, then 50/100/200 ms) and then the queue count, so
that Kueue's CI finishes in time: it was merged as 40 cohorts of 10 queues (20,000 workloads), and
Kueue's main later runs 10 cohorts of 100 queues with 50 workloads each (50,000). This bench keeps
the 2,000-queue, 60,000-workload version the issue names. Mapped as the baseline is: a cohort is a
pool of 2,000 GPUs (its queues' nominal quotas, 100 x 20) with 100 policies of reservation 20 and
limit 120, each policy's 30 tasks submitted at once (Kueue staggers creation by
``creationIntervalMs``; this bench does not). The quota-bound ideal is 4.1 s: a cohort's 8,150
GPU-seconds on its 2,000 GPUs. ``--scale`` keeps whole queues and their 30-task mix and scales the
estate: ``round(20 x scale)`` whole cohorts, or below 1/20 one cohort of ``round(2,000 x scale)``
queues on ``20 x queues`` GPUs (so each cohort's ideal stays 4.1 s).

In general the ideal is the largest of: each cohort's GPU-seconds over its pool's GPUs, each
policy's GPU-seconds over its limit (or the pool, if smaller) and the longest task.

Klique: a PostgreSQL database cloned for each run from a template built once (``--database``,
dropped and created afresh), gunicorn (gthread) on a free port, the engine (``run_engine`` or
Celery worker and beat on ``--redis``), ``--daemons-per-pool`` ``klique-worker`` daemons per pool in
process mode with fake GPUs (``--gpus``: no NVML; at least two for a 2,000-GPU pool, as one claim
carries at most 1,024 GPUs), each task ``sleep <run time>``. Every policy's
owner submits its tasks through ``POST /api/v1/tasks/bulk`` (one request per policy, 6 policies at
a time; where the server has no bulk endpoint, single submits). Makespan runs from the first submit
to the last task's end as the control plane recorded it. The template's policies, groups, users,
memberships and tokens are written in bulk after each cohort's first policy went through the
services (and their rules: the others are the same values, with no parent policy to sum under).

Slurm (``--slurm``, baseline only): the project's dev cluster (``deploy/slurm-dev``) in its own
folder, one node with 120 GPUs per cohort and as many CPUs, the same tasks as job arrays (one
``sbatch --array`` per policy and size, ``--wrap 'sleep <run time>'``); makespan from the first
sbatch until ``squeue`` is empty (polled every 0.2 s). With 5 cohorts Slurm gets one node of 600
GPUs: a looser constraint than five separate pools. Runs alternate Slurm, Klique. The large shape
has no Slurm side: one node of 40,000 GPUs and 6,000 ``sbatch`` calls is not the same comparison.

Reported per run: makespan, submit time and rate, placement-to-claim and placement-to-start (p50,
p90, p99, from the tasks' own timestamps), CPU seconds per process group (web, engine, daemons,
PostgreSQL, Redis, Slurm's daemons, the bench's own client) and the whole machine's busy CPU, and
the 1-minute load average; then medians over the runs, and the makespan over the ideal. The
machine is shared: read the load average beside each figure.

The throttles are raised for the run (``THROTTLE_*``): one daemon serves a whole pool of short
tasks, far more calls per minute than the defaults allow a daemon of an ordinary node.

``--smoke`` is one run at a tiny size, Klique's side only: the baseline's one cohort at 2% of each
class (60 tasks), or with ``--shape large`` 2 cohorts of 4 queues with 4, 2 and 1 tasks of each
class (56 tasks). The Slurm side runs only with ``--slurm`` as well, and starts its own dev
cluster, which cannot run beside another one (such as the test suite's, at SLURM_CONF) on the same
ports. The run exits 1 when a Klique run left a task not succeeded.

This script is the command line and the report; the parts live in ``bench/kueue/``: the shapes and
their work (``shape``), the template estate (``estate``), each system's run (``klique_side``,
``slurm_side``), what a run measures (``measure``) and the waits on the processes it starts
(``probes``).
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine_live import fresh_database  # noqa: E402
from bench.kueue.estate import build_template  # noqa: E402
from bench.kueue.klique_side import run_klique  # noqa: E402
from bench.kueue.measure import median_of  # noqa: E402
from bench.kueue.shape import ideal_makespan_s, shape_for, workload  # noqa: E402
from bench.kueue.slurm_side import run_slurm, start_slurm, stop_slurm  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shape",
        choices=("baseline", "large"),
        default="baseline",
        help="Kueue's baseline (1 or 5 cohorts of 6 queues) or its large shape (20 cohorts of 100)",
    )
    parser.add_argument("--cohorts", type=int, choices=(1, 5), help="baseline only; 1 unless given")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="baseline: share of each class's tasks; large: share of the queues, kept whole with their "
        "30 tasks (round(20 x scale) cohorts of 100, or one cohort of round(2000 x scale))",
    )
    parser.add_argument("--engine", choices=("loop", "celery"), default="loop")
    parser.add_argument("--interval", type=float, default=1.0, help="ENGINE_PASS_INTERVAL_S")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slurm", action="store_true", help="the same work on Slurm too")
    parser.add_argument(
        "--daemon-tree", type=Path, help="run the daemons from this tree's klique package (an older commit's)"
    )
    parser.add_argument("--daemons-per-pool", type=int, default=1, choices=(1, 2, 3, 4, 5, 6))
    parser.add_argument("--web-workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--timeout", type=float, default=1200, help="seconds a run may take")
    parser.add_argument("--database", default="postgres://postgres@127.0.0.1:5432/klique_bench_e2e")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/5")
    parser.add_argument("--keep", action="store_true", help="keep the logs of each run")
    parser.add_argument(
        "--log-statements",
        action="store_true",
        help="PostgreSQL logs every statement of the run with its duration (for profiling)",
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one run at a tiny size: 2%% of one baseline cohort, or 2 large cohorts of 4 queues",
    )
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(scale=0.02, runs=1, timeout=60)
        args = parser.parse_args()
    if args.shape == "large" and args.slurm:
        parser.error("--slurm runs with --shape baseline only (the large shape has no Slurm side)")
    if args.shape == "large" and args.cohorts:
        parser.error("--cohorts is for the baseline; the large shape scales with --scale")
    if args.scale <= 0:
        parser.error("--scale must be above 0")
    shape, scale = shape_for(args.shape, args.cohorts, args.scale, args.smoke)
    work = workload(shape, scale)
    template_url = args.database + "_template"
    os.environ.update(DJANGO_SETTINGS_MODULE="klique.settings.base", DATABASE_URL=template_url, DEBUG="0")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    fresh_database(template_url)
    import django

    django.setup()
    secrets_file = Path(tempfile.mkdtemp(prefix="klique-kueue-")) / "secrets.json"
    build_template(template_url, shape, secrets_file)
    secrets = json.loads(secrets_file.read_text())
    shutil.rmtree(secrets_file.parent)
    slurm_env = start_slurm(shape) if args.slurm else None
    results: list[dict] = []
    try:
        for run in range(1, args.runs + 1):
            if slurm_env:
                results.append({"run": run, **run_slurm(slurm_env, work)})
                _progress(results[-1])
            results.append({"run": run, **run_klique(args, shape, template_url, secrets, work, run)})
            _progress(results[-1])
    finally:
        if slurm_env:
            stop_slurm()
    klique = [r for r in results if r["system"] == "klique"]
    slurm = [r for r in results if r["system"] == "slurm"]
    summary = {
        "shape": shape.name,
        "cohorts": shape.cohorts,
        "policies": len(work),
        "pool_gpus": shape.pool_gpus,
        "tasks": sum(len(tasks) for _, tasks in work),
        "scale": None if args.smoke and args.shape == "large" else args.scale,
        "engine": args.engine,
        "ideal_makespan_s": ideal_makespan_s(work, shape),
        "klique_makespan_s": median_of(klique, "makespan_s"),
        "klique_submit_rate": median_of(klique, "submit_rate"),
        "klique_placement_to_start_p50_s": statistics.median(
            r["placement_to_start_s"]["p50"] for r in klique if r["placement_to_start_s"]["p50"] is not None
        )
        if klique
        else None,
        "slurm_makespan_s": median_of(slurm, "makespan_s"),
        "load_1m": median_of(results, "load_1m"),
    }
    if summary["klique_makespan_s"]:
        summary["klique_over_ideal"] = round(summary["klique_makespan_s"] / summary["ideal_makespan_s"], 2)
    if slurm and summary["klique_makespan_s"]:
        summary["klique_over_slurm"] = round(summary["klique_makespan_s"] / summary["slurm_makespan_s"], 2)
    if args.json:
        print(json.dumps({"summary": summary, "runs": results}, indent=2))
    else:
        print(json.dumps(summary, indent=2))
    if any(r["not_succeeded"] for r in klique):
        sys.exit("a Klique run left tasks not succeeded")


def _progress(result: dict) -> None:
    print(json.dumps(result), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
