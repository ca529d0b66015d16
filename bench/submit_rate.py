"""Benchmark of task submission through the user API: single submits and bulk submits against a
live gunicorn on PostgreSQL.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/klique_bench_submit .venv/bin/python bench/submit_rate.py

The database named in DATABASE_URL is dropped and created afresh with one group, its policy, a
compute resource and a member with a personal token. gunicorn serves ``klique.wsgi`` (gthread,
persistent database connections, DEBUG off) on a free port. Each run measures, one client over a
kept-alive connection:

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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine_live import fresh_database  # noqa: E402
from bench.worker_poll import cpu_s, free_port, server_pids  # noqa: E402

RESOURCE = "bench/a100"
SINGLE = 200
WARMUP = 20
BULK_TASKS = 3000
BATCHES = (500, 1000)


def build(runs: int) -> str:
    """The estate; returns the member's personal token. Each phase of each run submits to its own
    compute resource, so its queue holds only the phase's tasks (no engine runs: they all wait)."""
    from apps.accounts import services as accounts
    from apps.accounts.models import Group, Membership, User
    from apps.policies.models import ComputeResource, Profile, ResourcePolicy

    group = Group.objects.create(name="Bench", slug="bench")
    policy = ResourcePolicy.objects.create(group=group, reservation=0, limit=1000)
    names = [RESOURCE] + [resource(run, phase) for run in range(runs) for phase in ("single", *BATCHES)]
    for name in names:  # one compute resource per policy and profile
        profile = Profile.objects.create(name=name.replace("/", "-"), gpus=1)
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


def one_run(url: str, token: str, run: int, gunicorn_pid: int, database_url: str) -> dict:
    import httpx

    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url + "/api/v1/", headers=headers, timeout=120) as client:
        seq = 0
        for i in range(WARMUP):
            client.post("tasks/", json=body(seq + i, resource(run, "single"))).raise_for_status()
        seq += WARMUP
        times = []
        before = cpu_s(server_pids(gunicorn_pid, database_url))
        for i in range(SINGLE):
            t0 = time.perf_counter()
            response = client.post("tasks/", json=body(seq + i, resource(run, "single")))
            times.append(time.perf_counter() - t0)
            response.raise_for_status()
        after = cpu_s(server_pids(gunicorn_pid, database_url))
        seq += SINGLE
        times.sort()
        result = {
            "single_p50_ms": round(times[len(times) // 2] * 1000, 1),
            "single_p90_ms": round(times[int(len(times) * 0.9)] * 1000, 1),
            "single_server_cpu_ms": round(spent(before, after) * 1000 / SINGLE, 1),
        }
        for batch in BATCHES:
            before = cpu_s(server_pids(gunicorn_pid, database_url))
            t0 = time.perf_counter()
            for start in range(0, BULK_TASKS, batch):
                items = [body(seq + start + i, resource(run, batch)) for i in range(batch)]
                response = client.post("tasks/bulk/", json={"tasks": items})
                response.raise_for_status()
                assert len(response.json()) == batch
            seconds = time.perf_counter() - t0
            after = cpu_s(server_pids(gunicorn_pid, database_url))
            seq += BULK_TASKS
            result[f"bulk_{batch}_tasks_per_s"] = round(BULK_TASKS / seconds)
            result[f"bulk_{batch}_server_cpu_ms_per_task"] = round(
                spent(before, after) * 1000 / BULK_TASKS, 2
            )
    result["load_1min"] = round(os.getloadavg()[0], 1)
    return result


def profile(token: str) -> None:
    from django.db import connection
    from django.test import Client as TestClient
    from django.test.utils import CaptureQueriesContext

    client = TestClient(HTTP_AUTHORIZATION=f"Bearer {token}")
    for i in range(WARMUP):
        client.post("/api/v1/tasks/", body(i), content_type="application/json")
    with CaptureQueriesContext(connection) as queries:
        client.post("/api/v1/tasks/", body(-1), content_type="application/json")
    print(f"{len(queries.captured_queries)} queries per single submit:")
    for query in queries.captured_queries:
        print("  ", query["sql"][:150])
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    for i in range(SINGLE):
        client.post("/api/v1/tasks/", body(WARMUP + i), content_type="application/json")
    profiler.disable()
    print(f"\n{SINGLE} single submits in process: {(time.perf_counter() - t0) * 1000 / SINGLE:.2f} ms each")
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
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("DATABASE_URL must name a PostgreSQL database (it is dropped and created afresh)")
    os.environ.update(DJANGO_SETTINGS_MODULE="klique.settings.base", DEBUG="0", LOG_LEVEL="WARNING")
    fresh_database(url)
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    token = build(args.runs)
    if args.profile:
        profile(token)
        return
    import httpx

    runs = []
    base, gunicorn = server(args.gunicorn_workers, args.threads)
    try:
        with httpx.Client(timeout=5) as probe:
            wait_ready(probe, base)
        for run in range(args.runs):
            result = one_run(base, token, run, gunicorn.pid, url)
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


if __name__ == "__main__":
    main()
