"""Benchmark of task submission through the user API: single submits and bulk submits against a
live gunicorn on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/klique_bench_submit .venv/bin/python bench/submit_rate.py
    DATABASE_URL=... .venv/bin/python bench/submit_rate.py --smoke   # one run: 20 singles, 200 in bulk

The database named in DATABASE_URL is dropped and created afresh with one group, its policy, a
pool, compute resources (their profiles list the pool) and a member with a personal token.
gunicorn serves ``klique.wsgi`` (gthread, persistent database connections, DEBUG off) on a free
port. Each run measures, one client over a kept-alive connection:

* ``single``: 200 sequential ``POST /api/v1/tasks/`` on an idle server (after 20 to warm up):
  the p50 and p90 of the round trip;
* ``bulk 500`` and ``bulk 1000``: 3,000 tasks through ``POST /api/v1/tasks/bulk/`` in batches of
  500 and 1000: tasks per second over the whole submission (round trips included).

Each phase submits to a compute resource of its own (no engine runs, so every task waits), so a
queue holds only its phase's tasks: the answer's place in line is counted over it.

Three runs (``--runs``); the medians are printed with the 1-minute load average (other work on the
machine shows there) and the server's CPU per request or task (the gunicorn workers' and the
PostgreSQL backends' CPU time over the phase, /proc), which other load inflates far less than the
round trip. ``--profile`` instead profiles 200 single submits in this process with
Django's test client (cProfile, the top functions by cumulative time) and counts their queries.
The run exits 1 unless every task it sent was stored.
"""

import argparse
import cProfile
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine_live import fresh_database  # noqa: E402
from bench.worker_poll import cpu_s, free_port, server_pids  # noqa: E402

RESOURCE = "bench/a100"


class Sizes(NamedTuple):
    single: int
    warmup: int
    bulk_tasks: int
    batches: tuple[int, ...]


FULL = Sizes(single=200, warmup=20, bulk_tasks=3000, batches=(500, 1000))
SMOKE = Sizes(single=20, warmup=2, bulk_tasks=200, batches=(50, 100))


def build(runs: int, batches: tuple[int, ...]) -> str:
    """The estate; returns the member's personal token. Each phase of each run submits to its own
    compute resource, so its queue holds only the phase's tasks (no engine runs: they all wait)."""
    from apps.accounts import services as accounts
    from apps.accounts.models import Group, Membership, User
    from apps.policies import services as policies
    from apps.policies.models import ComputeResource, ResourcePolicy
    from apps.pools import services as pools

    group = Group.objects.create(name="Bench", slug="bench")
    policy = ResourcePolicy.objects.create(group=group, reservation=0, limit=1000)
    gpu_type = pools.create_gpu_type(name="A100")
    pool = pools.create_pool(name="bench", kind="kubernetes", gpu_type=gpu_type, capacity=64)
    names = [RESOURCE] + [resource(run, phase) for run in range(runs) for phase in ("single", *batches)]
    for name in names:  # one compute resource per policy and profile
        profile = policies.create_profile(name=name.replace("/", "-"), gpus=1, pools=[pool])
        ComputeResource.objects.create(name=name, policy=policy, profile=profile)
    user = User.objects.create(username="bench")
    Membership.objects.create(user=user, group=group, role=Membership.Role.MEMBER)
    return accounts.create_api_token(user=user, name="bench")[1]


def resource(run: int, phase) -> str:
    return f"bench/run{run}-{phase}"


def body(i: int, resource_name: str = RESOURCE) -> dict:
    return {"compute_resource": resource_name, "command": f"python train.py --seed {i}", "name": f"t{i}"}


def server(workers: int, threads: int):
    port = free_port()
    env = {**os.environ, "DB_CONN_MAX_AGE": "600", "DEBUG": "0", "LOG_LEVEL": "WARNING"}
    gunicorn = subprocess.Popen(
        [
            str(Path(sys.executable).with_name("gunicorn")), "klique.wsgi:application",
            "--bind", f"127.0.0.1:{port}", "--workers", str(workers), "--worker-class", "gthread",
            "--threads", str(threads), "--keep-alive", "10", "--log-level", "warning",
        ],
        cwd=ROOT, env=env,
    )  # fmt: skip
    return f"http://127.0.0.1:{port}", gunicorn


def wait_ready(client, url: str) -> None:
    import httpx

    for _ in range(150):
        try:
            client.get(url + "/healthz")
            return
        except httpx.TransportError:
            time.sleep(0.2)
    sys.exit("gunicorn did not answer")


def spent(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU seconds the gunicorn workers and the database's backends used in between."""
    return sum(after[pid] - before.get(pid, 0.0) for pid in after)


def one_run(url: str, token: str, run: int, gunicorn_pid: int, database_url: str, sizes: Sizes) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url + "/api/v1/", headers=headers, timeout=120) as client:
        seq = 0
        for i in range(sizes.warmup):
            client.post("tasks/", json=body(seq + i, resource(run, "single"))).raise_for_status()
        seq += sizes.warmup
        times = []
        before = cpu_s(server_pids(gunicorn_pid, database_url))
        for i in range(sizes.single):
            t0 = time.perf_counter()
            response = client.post("tasks/", json=body(seq + i, resource(run, "single")))
            times.append(time.perf_counter() - t0)
            response.raise_for_status()
        after = cpu_s(server_pids(gunicorn_pid, database_url))
        seq += sizes.single
        times.sort()
        result = {
            "single_p50_ms": round(times[len(times) // 2] * 1000, 1),
            "single_p90_ms": round(times[int(len(times) * 0.9)] * 1000, 1),
            "single_server_cpu_ms": round(spent(before, after) * 1000 / sizes.single, 1),
        }
        for batch in sizes.batches:
            before = cpu_s(server_pids(gunicorn_pid, database_url))
            t0 = time.perf_counter()
            for start in range(0, sizes.bulk_tasks, batch):
                items = [body(seq + start + i, resource(run, batch)) for i in range(batch)]
                response = client.post("tasks/bulk/", json={"tasks": items})
                response.raise_for_status()
                assert len(response.json()) == batch
            seconds = time.perf_counter() - t0
            after = cpu_s(server_pids(gunicorn_pid, database_url))
            seq += sizes.bulk_tasks
            result[f"bulk_{batch}_tasks_per_s"] = round(sizes.bulk_tasks / seconds)
            result[f"bulk_{batch}_server_cpu_ms_per_task"] = round(
                spent(before, after) * 1000 / sizes.bulk_tasks, 2
            )
    result["load_1min"] = round(os.getloadavg()[0], 1)
    return result


def profile(token: str, sizes: Sizes) -> None:
    from django.db import connection
    from django.test import Client as TestClient
    from django.test.utils import CaptureQueriesContext

    client = TestClient(HTTP_AUTHORIZATION=f"Bearer {token}")
    for i in range(sizes.warmup):
        client.post("/api/v1/tasks/", body(i), content_type="application/json")
    with CaptureQueriesContext(connection) as queries:
        client.post("/api/v1/tasks/", body(-1), content_type="application/json")
    print(f"{len(queries.captured_queries)} queries per single submit:")
    for query in queries.captured_queries:
        print("  ", query["sql"][:150])
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    for i in range(sizes.single):
        client.post("/api/v1/tasks/", body(sizes.warmup + i), content_type="application/json")
    profiler.disable()
    each = (time.perf_counter() - t0) * 1000 / sizes.single
    print(f"\n{sizes.single} single submits in process: {each:.2f} ms each")
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumulative").print_stats(45)
    print(out.getvalue())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--gunicorn-workers", type=int, default=2)
    parser.add_argument("--threads", type=int, default=4, help="threads per gunicorn worker")
    parser.add_argument("--json", action="store_true", help="print only the JSON result")
    parser.add_argument("--profile", action="store_true", help="profile single submits in process")
    parser.add_argument("--smoke", action="store_true", help="one run of 20 singles and 200 tasks in bulk")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(runs=1)
        args = parser.parse_args()
    sizes = SMOKE if args.smoke else FULL
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("DATABASE_URL must name a PostgreSQL database (it is dropped and created afresh)")
    os.environ.update(DJANGO_SETTINGS_MODULE="klique.settings.base", DEBUG="0", LOG_LEVEL="WARNING")
    fresh_database(url)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    token = build(args.runs, sizes.batches)
    if args.profile:
        profile(token, sizes)
        return
    import httpx

    runs = []
    base, gunicorn = server(args.gunicorn_workers, args.threads)
    try:
        with httpx.Client(timeout=5) as probe:
            wait_ready(probe, base)
        for run in range(args.runs):
            result = one_run(base, token, run, gunicorn.pid, url, sizes)
            runs.append(result)
            if not args.json:
                print(f"run {run + 1}: {json.dumps(result)}", flush=True)
    finally:
        gunicorn.terminate()
        gunicorn.wait()
    medians = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    summary = {
        "machine": machine,
        "gunicorn": f"{args.gunicorn_workers}x{args.threads} gthread",
        "runs": args.runs,
        "medians": medians,
    }
    print(json.dumps(summary, indent=None if args.json else 2))
    from apps.tasks.models import Task

    sent = args.runs * (sizes.warmup + sizes.single + len(sizes.batches) * sizes.bulk_tasks)
    stored = Task.objects.count()
    if stored != sent:
        sys.exit(f"{stored} tasks stored, {sent} sent")


if __name__ == "__main__":
    main()
