"""Klique's side of a run: a fresh clone of the estate, gunicorn, the engine (``run_engine`` or
Celery) and ``klique-worker`` daemons started, every policy's tasks submitted through the API, the
wait for them to end, and the run's figures read from its database."""

import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.kueue.estate import clone
from bench.kueue.measure import CpuMeter, percentiles, self_cpu
from bench.kueue.probes import answers, free_port, sql, wait_until
from bench.kueue.shape import Shape

ROOT = Path(__file__).resolve().parents[2]
FINAL = "('succeeded', 'failed', 'canceled')"
HIGH_THROTTLES = {
    f"THROTTLE_{scope}": "1000000/min" for scope in ("WORKER", "HEARTBEAT", "WAIT", "SYNC", "ENROL")
}


def submit_policy(server: str, token: str, name: str, tasks, bulk: list[bool]) -> None:
    import httpx

    items = [{"compute_resource": name, "command": f"sleep {run:g}", "gpus": gpus} for gpus, run in tasks]
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server, headers=headers, timeout=120) as http:
        if bulk[0]:
            for start in range(0, len(items), 1000):
                answer = http.post("/api/v1/tasks/bulk/", json={"tasks": items[start : start + 1000]})
                if answer.status_code in (301, 404, 405) and start == 0:
                    bulk[0] = False
                    break
                if answer.status_code != 201:
                    raise SystemExit(f"bulk submit refused: {answer.status_code} {answer.text[:500]}")
            else:
                return
        for item in items:
            answer = http.post("/api/v1/tasks/", json=item)
            if answer.status_code != 201:
                raise SystemExit(f"submit refused: {answer.status_code} {answer.text[:500]}")


def submit_all(server: str, secrets: dict, work) -> tuple[float, float, bool]:
    """Every policy's tasks at once; (start, end, bulk used)."""
    bulk = [True]
    started = time.time()
    threads = 6 if bulk[0] else 8
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda w: submit_policy(server, secrets["api"][w[0]], w[0], w[1], bulk), work))
    return started, time.time(), bulk[0]


def run_klique(args, shape: Shape, template_url: str, secrets: dict, work, run_no: int) -> dict:
    url = args.database
    clone(template_url, url)
    if args.log_statements:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'ALTER DATABASE "{url.rsplit("/", 1)[1]}" SET log_min_duration_statement = 0')
    env = {
        **os.environ,
        **HIGH_THROTTLES,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "klique.settings.base",
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
        "DB_CONN_MAX_AGE": "600",
        "ENGINE_PASS_INTERVAL_S": str(args.interval),
        "REDIS_URL": args.redis,
    }
    import redis

    redis.Redis.from_url(args.redis).flushdb()
    total = sum(len(tasks) for _, tasks in work)
    bin_dir = Path(sys.executable).parent
    port = free_port()
    server = f"http://127.0.0.1:{port}"
    folder = Path(tempfile.mkdtemp(prefix="klique-kueue-"))
    started: list[subprocess.Popen] = []

    def start(cmd, name, **kw):
        log = open(folder / f"{name}.log", "w")  # noqa: SIM115 - closed with the process
        cwd = kw.pop("cwd", ROOT)
        proc = subprocess.Popen(cmd, cwd=cwd, env=kw.pop("env", env), stdout=log, stderr=log, **kw)
        started.append(proc)
        return proc

    try:
        web = start(
            [str(bin_dir / "gunicorn"), "klique.wsgi:application", "--bind", f"127.0.0.1:{port}",
             "--workers", str(args.web_workers), "--worker-class", "gthread", "--threads", str(args.threads),
             "--keep-alive", "10", "--log-level", "warning"],
            "web",
        )  # fmt: skip
        if args.engine == "loop":
            engine = start(
                [sys.executable, "manage.py", "run_engine", "--interval", str(args.interval)], "engine"
            )
        else:
            engine = start(
                [str(bin_dir / "celery"), "-A", "klique", "worker", "-B", "-Q",
                 "engine,meter,sweep,autoscale,celery", "--concurrency", "2", "--loglevel", "WARNING",
                 "--schedule", str(folder / "beat-schedule")],
                "engine",
            )  # fmt: skip
        wait_until(lambda: answers(port), 60, "gunicorn")
        per_pool = daemons_per_pool(shape, args.daemons_per_pool)
        daemons = []
        for pool, token in secrets["enrolment"].items():
            for d in range(per_pool):
                gpus = shape.pool_gpus // per_pool + (d < shape.pool_gpus % per_pool)
                token_file = folder / f"{pool}.token"
                token_file.write_text(token)
                daemon_env = {
                    key: value
                    for key, value in os.environ.items()
                    if not key.startswith(("DATABASE_URL", "REDIS_URL", "DJANGO"))
                }
                daemon, daemon_cwd = [str(bin_dir / "klique-worker")], ROOT
                if args.daemon_tree:  # run from there, so that its klique package comes first
                    daemon_cwd = args.daemon_tree.resolve()
                    daemon = [sys.executable, "-c", RUN_DAEMON]
                    daemon_env["PYTHONPATH"] = str(daemon_cwd)
                daemons.append(
                    start(
                        [*daemon, "--server", server, "--enrolment-token-file",
                         str(token_file), "--mode", "process", "--gpus", str(gpus), "--hostname",
                         f"{pool}-node{d}", "--state-dir", str(folder / f"{pool}-{d}")],
                        f"daemon-{pool}-{d}",
                        env=daemon_env,
                        cwd=daemon_cwd,
                    )
                )  # fmt: skip
        n_daemons = len(daemons)
        wait_until(
            lambda: sql(url, "SELECT count(*) FROM pools_worker WHERE state = 'active'")[0][0] >= n_daemons,
            60,
            "the daemons to enrol",
        )
        time.sleep(1)
        meter = CpuMeter(
            {
                "web": [web.pid],
                "engine": [engine.pid],
                "daemons": [d.pid for d in daemons],
                "postgres": {"postgres"},
                "redis": {"redis-server"},
            }
        )
        client0 = self_cpu()
        t0, t_submitted, bulk = submit_all(server, secrets, work)
        deadline = time.monotonic() + args.timeout

        def finished() -> bool:
            done = sql(url, f"SELECT count(*) FROM tasks_task WHERE state IN {FINAL}")[0][0]
            if time.monotonic() > deadline:
                raise SystemExit(f"run {run_no}: only {done} of {total} tasks ended in {args.timeout} s")
            return done >= total

        wait_until(finished, args.timeout + 10, "the tasks to end", every=0.25)
        cpu = meter.done()
        cpu["bench client"] = round(self_cpu() - client0, 1)
        load = os.getloadavg()[0]
        rows = sql(
            url,
            "SELECT extract(epoch FROM max(ended_at)), count(*) FILTER (WHERE state <> 'succeeded'),"
            " sum(preemption_count) FROM tasks_task",
        )[0]
        lags = sql(
            url,
            "SELECT extract(epoch FROM claimed_at - placed_at), extract(epoch FROM started_at - placed_at),"
            " extract(epoch FROM placed_at - submitted_at) FROM tasks_task",
        )
        if args.keep:
            dump_tasks(url, folder / "tasks.csv")
        passes = sql(
            url,
            "SELECT count(*), percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_ms)"
            " FROM engine_passrecord WHERE NOT skipped",
        )[0]
        return {
            "system": "klique",
            "engine": args.engine,
            "tasks": total,
            "daemons": n_daemons,
            "makespan_s": round(float(rows[0]) - t0, 1),
            "submit_s": round(t_submitted - t0, 2),
            "submit_rate": round(total / max(t_submitted - t0, 1e-9)),
            "bulk": bulk,
            "not_succeeded": rows[1],
            "preemptions": int(rows[2] or 0),
            "placement_to_claim_s": percentiles([float(r[0]) for r in lags if r[0] is not None]),
            "placement_to_start_s": percentiles([float(r[1]) for r in lags if r[1] is not None]),
            "submit_to_placement_s": percentiles([float(r[2]) for r in lags if r[2] is not None]),
            "passes": passes[0],
            "pass_median_ms": round(float(passes[1] or 0), 1),
            "cpu_s": cpu,
            "load_1m": round(load, 2),
        }
    finally:
        for proc in reversed(started):
            proc.terminate()
        for proc in started:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
        else:
            print(f"logs kept in {folder}", file=sys.stderr)


def dump_tasks(url: str, path) -> None:
    """Each task's times (epoch seconds) and GPUs, for a timeline of the run (``--keep``)."""
    times = ", ".join(f"extract(epoch FROM {c})" for c in TIMES)
    rows = sql(url, f"SELECT id, gpus, state, {times} FROM tasks_task ORDER BY id")
    with open(path, "w") as out:
        out.write("id,gpus,state," + ",".join(TIMES) + "\n")
        for row in rows:
            out.write(",".join("" if v is None else str(v) for v in row) + "\n")


RUN_DAEMON = "import sys; from klique.worker.cli import main; sys.exit(main())"
TIMES = ("submitted_at", "placed_at", "claimed_at", "started_at", "ended_at")


def daemons_per_pool(shape: Shape, asked: int) -> int:
    """``asked``, or more where a daemon would serve more GPUs than the worker API takes in one claim
    (``MAX_GPUS_PER_WORKER``: the large shape's 2,000-GPU pools run on two daemons of 1,000)."""
    from apps.workers.api.serializers import MAX_GPUS_PER_WORKER

    return max(asked, -(-shape.pool_gpus // MAX_GPUS_PER_WORKER))
