"""Benchmark of the worker API: 2,000 simulated worker daemons polling gunicorn and PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/klique_workers_bench .venv/bin/python bench/worker_poll.py
    DATABASE_URL=... .venv/bin/python bench/worker_poll.py --smoke   # 50 workers, 2,000 tasks, 6 s runs

The database named in DATABASE_URL is dropped and created afresh with one pool, 2,000 enrolled
workers (each with its own worker token) and 60,000 placed tasks to claim (``--workers``,
``--tasks``). gunicorn serves ``klique.wsgi`` (gthread workers, persistent database connections)
and wrk drives it with bench/worker_poll.lua. Four runs:

* ``heartbeat, 2000 workers``: 2,000 connections, one per simulated worker, each heartbeating
  every ``--poll-ms`` (2 s, jittered ±20%), so about 1,000 requests/s are offered;
* ``claim, 2000 workers``: the same with claims (each claim takes a task: a locked read, an
  update and an event);
* ``heartbeat, saturated`` and ``claim, saturated``: 64 connections sending back to back, to find
  what the server can do at most.

wrk, gunicorn and PostgreSQL share this machine's cores, so the load generator takes CPU from
the server it measures; the 1-minute load average after each run is printed beside it (other
work on the machine shows there). So each run also reports the server's CPU per request (the
gunicorn workers' and the PostgreSQL backends' CPU time over the run, divided by the requests):
what the cores would allow at most is about ``1000 * cores / cpu_ms_per_request`` requests/s.
The run exits 1 when a run had errors or no request answered. ``--smoke`` raises the worker
throttles (``THROTTLE_*``): its 50 tokens carry every request, so each would pass its rate.
"""

import argparse
import json
import os
import platform
import secrets
import shutil
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine_live import fresh_database  # noqa: E402

TASKS = 60_000


def build(workers: int, tokens_file: Path, tasks: int = TASKS) -> None:
    from django.db import connection
    from django.utils import timezone

    from apps.accounts.models import Group, User
    from apps.accounts.services import hash_token
    from apps.policies import services as policies
    from apps.policies.models import ComputeResource, ResourcePolicy
    from apps.pools.models import GpuType, Pool, Worker
    from apps.tasks.models import Task

    pool = Pool.objects.create(
        name="bench", kind="baremetal", gpu_type=GpuType.objects.create(name="H100"), capacity=16000
    )
    raw = [f"kqw_{secrets.token_urlsafe(32)}" for _ in range(workers)]
    now = timezone.now()
    Worker.objects.bulk_create(
        Worker(pool=pool, hostname=f"node-{i:04}", gpus=8, token_hash=hash_token(token), last_heartbeat=now)
        for i, token in enumerate(raw)
    )
    tokens_file.write_text("\n".join(raw) + "\n")
    group = Group.objects.create(name="Bench", slug="bench")
    policy = ResourcePolicy.objects.create(group=group, reservation=0, limit=16000)
    resource = ComputeResource.objects.create(
        name="bench", policy=policy, profile=policies.create_profile(name="1gpu", gpus=1, pools=[pool])
    )
    user = User.objects.create(username="bench")
    Task.objects.bulk_create(
        (
            Task(
                user=user,
                compute_resource=resource,
                command="true",
                gpus=1,
                state="placed",
                queue_seq=i,
                pool=pool,
                placed_at=now,
            )
            for i in range(tasks)
        ),
        batch_size=5000,
    )
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_s(pids) -> dict[int, float]:
    """User + system CPU seconds of each process, from /proc."""
    found = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[pid] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def server_pids(gunicorn_pid: int, database_url: str) -> list[int]:
    """The gunicorn workers and the PostgreSQL backends serving the benchmark database."""
    import psycopg

    children = Path(f"/proc/{gunicorn_pid}/task/{gunicorn_pid}/children").read_text().split()
    with psycopg.connect(database_url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    return [int(pid) for pid in children] + [row[0] for row in rows]


@contextmanager
def server(workers: int, threads: int, nginx: bool = False):
    """A fresh gunicorn for each run, so that no run waits behind what the last one left queued.

    ``nginx``: behind nginx as the production site runs it (deploy/nginx: an upstream of 32 kept
    connections, the clients' connections kept 75 s): the daemons' connections end at nginx, and
    gunicorn sees a few long-lived ones. The CPU counted is still gunicorn's and PostgreSQL's."""
    port = free_port()
    gunicorn = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("gunicorn")), "klique.wsgi:application",
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--worker-class", "gthread",
            "--threads", str(threads), "--keep-alive", "10", "--worker-connections", "2000",
            "--backlog", "4096", "--log-level", "warning",
        ],
        cwd=ROOT, env={**os.environ, "DB_CONN_MAX_AGE": "600"},
    )  # fmt: skip
    proxy = None
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        if nginx:
            proxy, port = front(port)
        yield f"http://127.0.0.1:{port}", gunicorn.pid
    finally:
        if proxy is not None:
            proxy.terminate()
            proxy.wait()
        gunicorn.terminate()
        gunicorn.wait()


def front(upstream: int) -> tuple[subprocess.Popen, int]:
    """nginx on a free port in front of gunicorn on ``upstream``, with the production site's
    proxying (keepalive 32 to gunicorn, HTTP/1.1, clients kept 75 s); the process and its port."""
    import tempfile

    port, folder = free_port(), Path(tempfile.mkdtemp(prefix="klique-bench-nginx-"))
    user = "user root;\n" if os.geteuid() == 0 else ""
    temp = " ".join(f"{kind}_temp_path {folder}/{kind};" for kind in ("client_body", "proxy"))
    (folder / "nginx.conf").write_text(
        f"{user}daemon off;\nworker_processes 1;\npid {folder}/nginx.pid;\nerror_log {folder}/error.log;\n"
        "events { worker_connections 8192; }\n"
        f"http {{\n  access_log off;\n  keepalive_timeout 75s;\n  keepalive_requests 100000;\n  {temp}\n"
        f"  upstream web {{ server 127.0.0.1:{upstream}; keepalive 32; }}\n"
        f"  server {{\n    listen 127.0.0.1:{port} backlog=4096;\n    location / {{\n"
        "      proxy_pass http://web;\n      proxy_http_version 1.1;\n"
        '      proxy_set_header Connection "";\n      proxy_set_header Host $http_host;\n    }\n  }\n}\n'
    )
    process = subprocess.Popen(["nginx", "-p", str(folder), "-c", str(folder / "nginx.conf")])
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nginx did not start: {(folder / 'error.log').read_text()[-2000:]}")


def wrk(
    url: str,
    tokens: Path,
    endpoint: str,
    connections: int,
    poll_ms: int,
    duration_s: int,
    threads: int = 2,
    spread: bool = False,
) -> dict:
    """One wrk run. ``spread``: each connection's first poll at a random point of one interval (a
    running estate), not all of them after one jittered interval (a restart storm)."""
    env = {
        **os.environ,
        "KLIQUE_TOKENS": str(tokens),
        "KLIQUE_ENDPOINT": endpoint,
        "KLIQUE_POLL_MS": str(poll_ms),
        "KLIQUE_SPREAD_FIRST": str(-(-connections // threads) if spread else 0),
    }
    args = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s}s", "--timeout", "10s"]
    args += ["-s", str(ROOT / "bench" / "worker_poll.lua"), url]
    out = subprocess.run(args, env=env, capture_output=True, text=True, check=True).stdout
    result = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])
    seconds = result["duration_us"] / 1e6
    return {
        "requests_per_s": round(result["requests"] / seconds),
        "p50_ms": round(result["p50_us"] / 1000, 1),
        "p99_ms": round(result["p99_us"] / 1000, 1),
        "max_ms": round(result["max_us"] / 1000, 1),
        "errors": result["non2xx"] + result["socket_errors"],
        "requests": result["requests"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2000, help="simulated worker daemons")
    parser.add_argument("--poll-ms", type=int, default=2000, help="each worker's poll interval")
    parser.add_argument("--duration", type=int, default=20, help="seconds per run")
    parser.add_argument("--gunicorn-workers", type=int, default=3)
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument("--tasks", type=int, default=TASKS, help="placed tasks to claim")
    parser.add_argument("--smoke", action="store_true", help="50 workers, 2,000 tasks, 6 s runs")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(workers=50, tasks=2000, duration=6, poll_ms=500)
        args = parser.parse_args()
        os.environ.update({f"THROTTLE_{scope}": "1000000/min" for scope in ("WORKER", "HEARTBEAT", "SYNC")})
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("DATABASE_URL must name a PostgreSQL database (it is dropped and created afresh)")
    if not shutil.which("wrk"):
        sys.exit("needs wrk: apt-get install wrk")
    os.environ.update(DJANGO_SETTINGS_MODULE="klique.settings.base", DEBUG="0", LOG_LEVEL="WARNING")
    fresh_database(url)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    tokens = ROOT / "bench" / ".worker_tokens"
    t0 = time.perf_counter()
    build(args.workers, tokens, args.tasks)
    print(f"built {args.workers} workers and {args.tasks} placed tasks in {time.perf_counter() - t0:.1f} s")
    runs = [
        (f"heartbeat, {args.workers} workers", "heartbeat", args.workers, args.poll_ms),
        (f"claim, {args.workers} workers", "claim", args.workers, args.poll_ms),
        ("heartbeat, saturated", "heartbeat", 64, 0),
        ("claim, saturated", "claim", 64, 0),
    ]
    results = {}
    print(
        f"\n{'run':<26} {'req/s':>7} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'errors':>6}"
        f" {'cpu ms/req':>10} {'load':>5}"
    )
    try:
        for name, endpoint, connections, poll_ms in runs:
            with server(args.gunicorn_workers, args.threads) as (base, gunicorn_pid):
                wrk(base, tokens, endpoint, 16, 0, 3)
                before = cpu_s(server_pids(gunicorn_pid, url))
                result = wrk(base, tokens, endpoint, connections, poll_ms, args.duration)
                after = cpu_s(server_pids(gunicorn_pid, url))
            spent = sum(after[pid] - before.get(pid, 0.0) for pid in after)
            result["server_cpu_ms_per_request"] = round(spent * 1000 / max(result["requests"], 1), 2)
            result["load_1min"] = round(os.getloadavg()[0], 1)
            results[name] = result
            print(
                f"{name:<26} {result['requests_per_s']:>7} {result['p50_ms']:>7} {result['p99_ms']:>7}"
                f" {result['max_ms']:>7} {result['errors']:>6} {result['server_cpu_ms_per_request']:>10}"
                f" {result['load_1min']:>5}"
            )
    finally:
        tokens.unlink(missing_ok=True)
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    print(
        json.dumps(
            {"machine": machine, "gunicorn": f"{args.gunicorn_workers}x{args.threads} gthread", **results}
        )
    )
    failed = [name for name, r in results.items() if r["errors"] or not r["requests"]]
    if failed:
        sys.exit(f"errors or no answer in: {', '.join(failed)}")


if __name__ == "__main__":
    main()
