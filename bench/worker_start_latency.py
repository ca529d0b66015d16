"""Placement to start: how long a placed task waits before its daemon has started it.

    .venv/bin/python bench/worker_start_latency.py [--tasks 30] [--interval 1]
    .venv/bin/python bench/worker_start_latency.py --smoke    # 3 tasks, 0.5-1 s apart
    .venv/bin/python bench/worker_start_latency.py --batch 50 --tasks 150   # 3 claims of 50

The database named in DATABASE_URL (default ``klique_bench_h4``) is dropped and created afresh
with one pool of one GPU, one policy and one user. gunicorn (gthread) serves the API, ``manage.py
run_engine`` places work (Redis at REDIS_URL, default db 4, so that a submit asks for a pass at
once and a placement wakes the daemon's ``wait``), and one ``klique-worker`` daemon in process mode
with one fake GPU (``--gpus 1``, no NVML) and its default polling serves the pool. Tasks
(``sleep 0.2``) are submitted one at a time, each a random 0.5-4 s (``--gap-max``) after the one
before has ended, so every placement finds the daemon idle, at no fixed phase of its polling.
For each task the control plane's events give:

* submit to placement (``submitted`` -> ``placed``: the engine's part);
* placement to claim (``placed`` -> ``claimed``) and placement to start (``placed`` ->
  ``started``, whose time is when the daemon saw the process running): the daemon's part;
* claim to start (``claimed`` -> ``started``): the daemon's own start of what it claimed.

``--batch N`` measures a claim of N tasks at once instead (issue 31: claim to start for a batch
of 50): the pool, the policy and the daemon have N GPUs, and the tasks are submitted N at a time
in one bulk request (``--tasks`` in all), each batch after the one before has ended, so that the
daemon claims them together and starts them side by side.

Medians and the 90th percentile are printed with the 1-minute load average; the run exits 1
unless every task succeeded. ``--no-redis`` runs
without Redis (the engine's interval bounds placement; ``wait`` polls the database). ``--daemon-tree
DIR`` runs the daemon from another checkout's ``klique`` package, to compare with an older daemon:

    git archive HEAD klique | tar -x -C /tmp/before
    .venv/bin/python bench/worker_start_latency.py --daemon-tree /tmp/before
"""

import argparse
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine_live import fresh_database  # noqa: E402

DEFAULT_DATABASE = "postgres://postgres@127.0.0.1:5432/klique_bench_h4"
DEFAULT_REDIS = "redis://127.0.0.1:6379/4"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise SystemExit(f"timed out waiting for {what}")


def build(gpus: int = 1) -> tuple[str, str, str]:
    """One pool of ``gpus`` GPUs served by the daemon, and a member who submits: (compute
    resource, personal API token, enrolment token)."""
    from django.utils import timezone

    from apps.accounts import services as accounts
    from apps.accounts.models import Group, Membership, User
    from apps.policies import services as policies
    from apps.pools import services as pools
    from apps.pools.models import EnrolmentToken, GpuType, Pool

    pool = Pool.objects.create(
        name="bench", kind=Pool.Kind.BAREMETAL, gpu_type=GpuType.objects.create(name="H100"), capacity=gpus
    )
    profile = policies.create_profile(name="1gpu", gpus=1, pools=[pool])
    group = Group.objects.create(name="Bench", slug="bench")
    policy = policies.create_policy(group=group, reservation=gpus, limit=gpus)
    resource = policies.connect(policy=policy, profile=profile, name="bench-1gpu")
    user = User.objects.create(username="bench")
    accounts.add_membership(user=user, group=group, role=Membership.Role.MEMBER)
    _, api_token = accounts.create_api_token(user=user, name="bench")
    enrolment = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="bench"), now=timezone.now())
    return resource.name, api_token, enrolment


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--interval", type=float, default=1.0, help="run_engine --interval")
    parser.add_argument("--gap-max", type=float, default=4.0, help="idle 0.5 s to this between tasks")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--no-redis", action="store_true", help="run without Redis")
    parser.add_argument("--daemon-tree", type=Path, help="run the daemon from this tree's klique package")
    parser.add_argument("--batch", type=int, default=1, help="tasks claimed at once (N GPUs)")
    parser.add_argument("--smoke", action="store_true", help="3 tasks, 0.5-1 s apart")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(tasks=3, gap_max=1.0)
        args = parser.parse_args()
    url = os.environ.get("DATABASE_URL") or DEFAULT_DATABASE
    redis_url = "" if args.no_redis else os.environ.get("REDIS_URL") or DEFAULT_REDIS
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("KLIQUE_")},
        "DJANGO_SETTINGS_MODULE": "klique.settings.base",
        "DATABASE_URL": url,
        "REDIS_URL": redis_url,
        "DEBUG": "0",
        "LOG_LEVEL": "WARNING",
    }
    os.environ.update(env)
    fresh_database(url)
    if redis_url:
        import redis

        redis.Redis.from_url(redis_url).flushdb()
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    resource, api_token, enrolment = build(args.batch)

    import httpx

    from apps.tasks.models import Task, TaskEvent

    folder = Path(tempfile.mkdtemp(prefix="klique-start-latency-"))
    port = free_port()
    bin_dir = Path(sys.executable).parent
    processes = []

    def start(command: list[str], name: str, cwd: Path = ROOT, **extra: str) -> subprocess.Popen:
        log = (folder / f"{name}.log").open("ab")
        process = subprocess.Popen(
            command, cwd=cwd, env={**env, **extra}, stdout=log, stderr=subprocess.STDOUT
        )
        processes.append(process)
        return process

    try:
        start(
            [str(bin_dir / "gunicorn"), "klique.wsgi:application", "--bind", f"127.0.0.1:{port}",
             "--workers", "2", "--worker-class", "gthread", "--threads", "8", "--log-level", "warning"],
            "gunicorn", DB_CONN_MAX_AGE="600",
        )  # fmt: skip
        start([sys.executable, "manage.py", "run_engine", "--interval", str(args.interval)], "engine")
        server = f"http://127.0.0.1:{port}"

        def answers() -> bool:
            try:
                return httpx.get(f"{server}/api/v1/", timeout=2).status_code < 500
            except httpx.HTTPError:
                return False

        wait_until(answers, 60, "gunicorn")
        daemon = [str(bin_dir / "klique-worker")]
        daemon_env = {"KLIQUE_ENROLMENT_TOKEN": enrolment}
        daemon_cwd = ROOT
        if args.daemon_tree:  # run from there, so that its klique package comes first
            daemon_cwd = args.daemon_tree.resolve()
            daemon = [
                sys.executable,
                "-c",
                "import sys; from klique.worker.cli import main; sys.exit(main())",
            ]
            daemon_env["PYTHONPATH"] = str(args.daemon_tree.resolve())
        start(
            [*daemon, "--server", server, "--gpus", str(args.batch), "--hostname", "bench-1",
             "--state-dir", str(folder / "worker")],
            "worker", daemon_cwd, **daemon_env,
        )  # fmt: skip
        http = httpx.Client(base_url=server, headers={"Authorization": f"Bearer {api_token}"}, timeout=30)
        wait_until(lambda: "enrolled" in (folder / "worker.log").read_text(), 60, "the daemon")
        time.sleep(2)  # the daemon's first claim and wait are under way
        done = {"succeeded", "failed", "canceled"}
        rng = random.Random(args.seed)
        ids = []
        item = {"compute_resource": resource, "command": "sleep 0.2"}
        for _ in range(max(1, args.tasks // args.batch)):
            if args.batch == 1:
                answer = http.post("/api/v1/tasks/", json=item)
                assert answer.status_code == 201, answer.text
                batch = [answer.json()["id"]]
            else:
                answer = http.post("/api/v1/tasks/bulk/", json={"tasks": [item] * args.batch})
                assert answer.status_code == 201, answer.text
                batch = [created["id"] for created in answer.json()]
            ids += batch
            wait_until(
                lambda batch=batch: Task.objects.filter(pk__in=batch, state__in=done).count() == len(batch),
                120,
                f"tasks {batch[0]}-{batch[-1]}",
            )
            time.sleep(rng.uniform(0.5, args.gap_max))  # idle again, at no fixed phase of its polling
        events = {}
        for task_id, kind, at in TaskEvent.objects.filter(task_id__in=ids).values_list(
            "task_id", "kind", "at"
        ):
            events.setdefault(task_id, {}).setdefault(kind, at)

        def gaps(first: str, then: str) -> list[float]:
            return [
                (e[then] - e[first]).total_seconds() * 1000
                for e in events.values()
                if first in e and then in e
            ]

        load = os.getloadavg()[0]
        tree = f"; daemon from {args.daemon_tree}" if args.daemon_tree else ""
        at_once = "one at a time" if args.batch == 1 else f"{args.batch} at a time"
        print(f"{len(ids)} tasks, {at_once}; redis: {'on' if redis_url else 'off'}{tree}; load {load:.2f}")
        for label, first, then in (
            ("submit -> placed", "submitted", "placed"),
            ("placed -> claimed", "placed", "claimed"),
            ("placed -> started", "placed", "started"),
            ("claimed -> started", "claimed", "started"),
        ):
            values = gaps(first, then)
            print(
                f"  {label:18} p50 {statistics.median(values):7.0f} ms"
                f"   p90 {percentile(values, 0.9):7.0f} ms   max {max(values):7.0f} ms   (n={len(values)})"
            )
        succeeded = Task.objects.filter(pk__in=ids, state="succeeded").count()
        if succeeded != len(ids):
            raise SystemExit(f"{succeeded} of {len(ids)} tasks succeeded")
    finally:
        for process in reversed(processes):
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        print(f"logs in {folder}")


if __name__ == "__main__":
    main()
