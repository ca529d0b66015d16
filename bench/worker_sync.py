"""Benchmark of ``POST /api/v1/workers/sync``: simulated worker daemons syncing with gunicorn and PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/klique_sync_bench .venv/bin/python bench/worker_sync.py
    DATABASE_URL=... .venv/bin/python bench/worker_sync.py --smoke   # 50 daemons, 20 calls, one 8 s run each
    DATABASE_URL=... .venv/bin/python bench/worker_sync.py --nginx   # behind nginx, as production runs it
    DATABASE_URL=... .venv/bin/python bench/worker_sync.py --nginx --spread   # a running estate, no burst

The database named in DATABASE_URL is dropped and created afresh with one pool and ``--workers``
enrolled workers (each with its own worker token), nothing placed: a daemon's steady poll, a
heartbeat and a claim that finds nothing. Two parts:

* **In process** (Django's test client, no HTTP server): the queries and the CPU of one call,
  the web process's and its PostgreSQL backend's (from /proc), for a steady sync against the
  heartbeat and claim sent apart, and for a sync of 10 reports (5 log tails, 5 exits), a
  heartbeat and a claim against the same 12 calls apart. Medians of ``--calls``.
* **Over HTTP** (gunicorn ``klique.wsgi``, gthread workers, persistent database connections,
  driven by wrk with bench/worker_poll.lua): ``--workers`` connections, one per daemon, each
  syncing every ``--poll-ms`` (5 s, the default heartbeat, jittered ±20%); the same daemons
  sending heartbeat and claim apart (``pair``: two requests per poll); and 64 connections back
  to back (saturated). Each run reports polls/s, p50/p99 per request, the server's CPU (gunicorn
  workers and PostgreSQL backends, from /proc) as a share of ``--cores`` cores and per poll, and
  the 1-minute load average after it. ``--repeat`` runs each
  and prints the medians; ``--runs sync`` keeps only the first. wrk delays each connection's first
  request by one interval: a run shorter than about four intervals measures mostly the ramp, and
  every daemon's first poll lands within 40% of an interval (a restart storm). ``--spread`` puts
  each first poll at a random point of one interval instead: a running estate.

wrk shares the machine's cores with the server it measures; its own CPU is not counted. The run
exits 1 when a call in process was refused, or a run over HTTP had errors or no request answered.
``--smoke`` raises the worker throttles (``THROTTLE_*``): its 50 tokens carry every request.
"""

import argparse
import json
import os
import shutil
import statistics
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine_live import fresh_database  # noqa: E402
from bench.worker_poll import build, cpu_s, server, server_pids, wrk  # noqa: E402

STEADY_SYNC = {
    "reports": [],
    "heartbeat": {"tasks": [], "gpus": "8", "free_gpus": "8"},
    "claim": {"slots": ["1"] * 8, "max_tasks": 1},
}


def _backend_cpu_s() -> float:
    from django.db import connection

    connection.ensure_connection()
    return cpu_s([connection.connection.info.backend_pid]).popitem()[1]


def _measure(calls, repeat: int, prepare=None) -> dict:
    """CPU ms per round (this process, and its PostgreSQL backend: /proc counts in 10 ms ticks, so
    over all rounds) and the queries of the last round of ``calls``; ``prepare`` runs before each
    round, outside the count."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    web = database = 0.0
    queries = []
    for _ in range(repeat):
        state = prepare() if prepare else None
        db0, cpu0 = _backend_cpu_s(), time.process_time()
        with CaptureQueriesContext(connection) as captured:
            for call in calls:
                answer = call(state)
                assert answer.status_code == 200, answer.content
        web += time.process_time() - cpu0
        database += _backend_cpu_s() - db0
        queries = [query["sql"][:60] for query in captured]
    if os.environ.get("BENCH_SHOW_QUERIES"):
        print("\n".join(queries))
    return {
        "queries": len(queries),
        "web_cpu_ms": round(web * 1000 / repeat, 2),
        "db_cpu_ms": round(database * 1000 / repeat, 2),
    }


def in_process(calls: int) -> dict:
    """Steady and 10-report polls, as one sync and as the calls apart."""
    from decimal import Decimal

    from django.utils import timezone
    from rest_framework.test import APIClient

    from apps.accounts.models import Group, User
    from apps.policies import services as policies
    from apps.policies.models import ComputeResource, ResourcePolicy
    from apps.pools import services
    from apps.pools.models import EnrolmentToken, GpuType, Pool
    from apps.tasks import services as lifecycle
    from apps.tasks.models import Task
    from apps.workers import services as protocol

    pool = Pool.objects.create(
        name="in-process", kind="baremetal", gpu_type=GpuType.objects.create(name="A100"), capacity=64
    )
    enrolment = EnrolmentToken(pool=pool, name="bench")
    services.issue_enrolment_token(enrolment, now=timezone.now())
    worker, raw = protocol.enrol(
        enrolment, hostname="node", gpus=Decimal(8), mode="process", now=timezone.now()
    )
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    user = User.objects.create(username="in-process")
    group = Group.objects.create(name="In process", slug="in-process")
    policy = ResourcePolicy.objects.create(group=group, reservation=0, limit=64)
    profile = policies.create_profile(name="1 gpu in process", gpus=1, pools=[pool])
    resource = ComputeResource.objects.create(name="in-process", policy=policy, profile=profile)
    url = "/api/v1/workers/"
    post = client.post

    def running_five() -> list[int]:
        tasks = [lifecycle.submit(user=user, compute_resource=resource, command="true") for _ in range(5)]
        loaded = Task.objects.select_related("compute_resource__policy", "compute_resource__profile")
        lifecycle.place_many([(loaded.get(pk=t.pk), pool) for t in tasks], timezone.now())
        protocol.claim(worker, free=None, free_gpus=Decimal(8), max_tasks=5, now=timezone.now())
        for task in tasks:
            protocol.report_started(worker, task.pk, now=timezone.now())
        return [task.pk for task in tasks]

    def reports(ids):
        return [{"task": pk, "what": "log", "body": {"tail": "step 10\n"}} for pk in ids] + [
            {"task": pk, "what": "exited", "body": {"exit_code": 0}} for pk in ids
        ]

    def apart(ids):
        answers = [
            post(f"{url}tasks/{r['task']}/{r['what']}", r["body"], format="json") for r in reports(ids)
        ]
        answers.append(post(f"{url}heartbeat", STEADY_SYNC["heartbeat"], format="json"))
        answers.append(post(f"{url}claim", STEADY_SYNC["claim"], format="json"))
        return answers

    post(f"{url}sync", STEADY_SYNC, format="json")  # warm: imports, the token's cache entry
    from django.conf import settings

    # One worker calls back to back here: rates it never reaches, so the throttles still count.
    settings.THROTTLE_RATES = {scope: "1000000/min" for scope in settings.THROTTLE_RATES}
    return {
        "steady: sync": _measure([lambda _: post(f"{url}sync", STEADY_SYNC, format="json")], calls),
        "steady: heartbeat + claim apart": _measure(
            [
                lambda _: post(f"{url}heartbeat", STEADY_SYNC["heartbeat"], format="json"),
                lambda _: post(f"{url}claim", STEADY_SYNC["claim"], format="json"),
            ],
            calls,
        ),
        "10 reports: sync": _measure(
            [lambda ids: post(f"{url}sync", {**STEADY_SYNC, "reports": reports(ids)}, format="json")],
            max(calls // 10, 5),
            prepare=running_five,
        ),
        "10 reports: 12 calls apart": _measure(
            [lambda ids: _last(apart(ids))], max(calls // 10, 5), prepare=running_five
        ),
    }


def _last(answers):
    for answer in answers:
        assert answer.status_code == 200, answer.content
    return answers[-1]


@contextmanager
def sweeping(on: bool):
    """The worker sweep every ``ENGINE_PASS_INTERVAL_S`` in a thread while the block runs, as
    Celery beat runs it; yields a dict that holds, once the block is done, the sweeps run and the
    daemons it marked lost, of those wrk drives (pool ``bench``: the in-process measure's own
    worker falls silent after it, and is rightly lost). Its clock starts afresh with the block:
    no daemon polls between two runs (wrk is not running), a gap the sweep treats as the control
    plane's own downtime."""
    found = {"sweeps": 0, "lost": 0}
    if not on:
        yield found
        return
    from django.conf import settings
    from django.db import connection
    from django.utils import timezone

    from apps.pools.models import Worker, WorkerSweep
    from apps.workers.services.daemons import sweep

    WorkerSweep.objects.all().delete()
    driven = Worker.objects.filter(pool__name="bench", state=Worker.State.LOST)
    lost_before = driven.count()
    stop = threading.Event()

    def run():
        try:
            while not stop.wait(settings.ENGINE_PASS_INTERVAL_S):
                sweep(timezone.now())
                found["sweeps"] += 1
        finally:
            connection.close()

    thread = threading.Thread(target=run, name="sweep", daemon=True)
    thread.start()
    try:
        yield found
    finally:
        stop.set()
        thread.join()
        found["lost"] = driven.count() - lost_before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2000, help="simulated worker daemons")
    parser.add_argument("--poll-ms", type=int, default=5000, help="each daemon's sync interval")
    parser.add_argument("--duration", type=int, default=20, help="seconds per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; medians are printed")
    parser.add_argument("--calls", type=int, default=200, help="calls per in-process measure")
    parser.add_argument("--gunicorn-workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=8, help="threads per gunicorn worker")
    parser.add_argument("--cores", type=int, default=os.cpu_count(), help="the server's cores, for CPU %%")
    parser.add_argument("--skip-http", action="store_true", help="only the in-process part")
    parser.add_argument(
        "--runs",
        default="sync,pair,saturated",
        help="which runs over HTTP, comma-separated: sync, pair (heartbeat + claim apart), saturated",
    )
    parser.add_argument("--nginx", action="store_true", help="behind nginx, as production runs it")
    parser.add_argument(
        "--spread", action="store_true", help="first polls spread over an interval (no start-up burst)"
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="run the worker sweep beside each run, every ENGINE_PASS_INTERVAL_S as the beat does, and count"
        " the workers it marked lost",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="50 daemons, 20 calls, one 8 s run of each (short runs went unanswered)",
    )
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(workers=50, poll_ms=1000, duration=8, repeat=1, calls=20)
        args = parser.parse_args()
        os.environ.update({f"THROTTLE_{scope}": "1000000/min" for scope in ("WORKER", "HEARTBEAT", "SYNC")})
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("DATABASE_URL must name a PostgreSQL database (it is dropped and created afresh)")
    if not args.skip_http and not shutil.which("wrk"):
        sys.exit("needs wrk: apt-get install wrk")
    os.environ.update(DJANGO_SETTINGS_MODULE="klique.settings.base", DEBUG="0", LOG_LEVEL="WARNING")
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
    # The throttles count in the cache; at 600/min a daemon syncing every 5 s is far below them.
    fresh_database(url)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    tokens = ROOT / "bench" / ".worker_sync_tokens"
    build(args.workers, tokens, tasks=0)
    print(f"built {args.workers} workers, nothing placed")
    results: dict = {"in_process": in_process(args.calls)}
    print(f"\n{'in process (per poll, mean)':<34} {'queries':>7} {'web cpu ms':>10} {'db cpu ms':>9}")
    for name, row in results["in_process"].items():
        print(f"{name:<34} {row['queries']:>7} {row['web_cpu_ms']:>10} {row['db_cpu_ms']:>9}")
    if args.skip_http:
        tokens.unlink(missing_ok=True)
        print(json.dumps(results))
        return
    from django.db import connections

    connections.close_all()
    every = {
        "sync": (f"sync, {args.workers} daemons every {args.poll_ms} ms", "sync", args.workers, args.poll_ms),
        "pair": (f"heartbeat + claim apart, {args.workers} daemons", "pair", args.workers, args.poll_ms),
        "saturated": ("sync, saturated (64 conn.)", "sync", 64, 0),
    }
    runs = [every[name] for name in args.runs.split(",")]
    print(
        f"\n{'over HTTP (median of ' + str(args.repeat) + ')':<40} {'polls/s':>7} {'p50 ms':>7} {'p99 ms':>7}"
        f" {'errors':>6} {'cpu %':>6} {'cpu ms/poll':>11} load"
    )
    failed = []
    try:
        for name, endpoint, connections_n, poll_ms in runs:
            rows = []
            for _ in range(args.repeat):
                with server(args.gunicorn_workers, args.threads, args.nginx) as (base, gunicorn_pid):
                    wrk(base, tokens, endpoint, 16, 0, 3)
                    before = cpu_s(server_pids(gunicorn_pid, url))
                    t0 = time.perf_counter()
                    with sweeping(args.sweep) as swept:
                        row = wrk(
                            base, tokens, endpoint, connections_n, poll_ms, args.duration, spread=args.spread
                        )
                    wall = time.perf_counter() - t0
                    after = cpu_s(server_pids(gunicorn_pid, url))
                spent = sum(after[pid] - before.get(pid, 0.0) for pid in after)
                per_poll = 2 if endpoint == "pair" else 1
                row["polls_per_s"] = round(row["requests_per_s"] / per_poll)
                row["cpu_percent"] = round(100 * spent / wall / args.cores, 1)
                row["cpu_ms_per_poll"] = round(spent * 1000 * per_poll / max(row["requests"], 1), 2)
                row["load_1min"] = round(os.getloadavg()[0], 1)
                if args.sweep:
                    row["sweeps"], row["marked_lost"] = swept["sweeps"], swept["lost"]
                    print(f"  {swept['sweeps']} sweeps, {swept['lost']} workers marked lost")
                    if swept["lost"]:
                        failed.append(f"{name} (workers marked lost)")
                rows.append(row)
                if row["errors"] or not row["requests"]:
                    failed.append(name)
            keys = ["polls_per_s", "p50_ms", "p99_ms", "errors", "cpu_percent", "cpu_ms_per_poll"]
            median = {key: statistics.median(r[key] for r in rows) for key in keys}
            median["load_1min"] = [r["load_1min"] for r in rows]
            results[name] = median
            print(
                f"{name:<40} {median['polls_per_s']:>7} {median['p50_ms']:>7} {median['p99_ms']:>7}"
                f" {median['errors']:>6} {median['cpu_percent']:>6} {median['cpu_ms_per_poll']:>11}"
                f" {'/'.join(str(x) for x in median['load_1min'])}"
            )
    finally:
        tokens.unlink(missing_ok=True)
    print(json.dumps(results))
    if failed:
        sys.exit(f"errors or no answer in: {', '.join(failed)}")


if __name__ == "__main__":
    main()
