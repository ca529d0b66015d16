"""Benchmark of the task lifecycle writes alone on PostgreSQL: ``place_many``,
``request_stop_many`` (a preemption, half of the tasks claimed by a worker, so the other half is
requeued at once through ``stopped_many``), ``stopped_many`` (the claimed half's work stopped)
and ``finish`` (one task at a time, as a daemon's report of a task's end calls it); then the
engine's verdict rewrite (``apps.engine.apply._store_verdicts``) of ``--verdicts`` waiting tasks,
to compare ``--fillfactor 100`` with the migrations' 80.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/klique_bench .venv/bin/python bench/lifecycle_writes.py
    DATABASE_URL=... .venv/bin/python bench/lifecycle_writes.py --sizes 50 800 --rounds 7 --profile
    DATABASE_URL=... .venv/bin/python bench/lifecycle_writes.py --smoke   # batches of 10 and 40, 2 rounds

The database named in DATABASE_URL is dropped and created afresh. Each call runs in its own
transaction, committed (the commit is timed), on tasks loaded as the engine's apply loads them.
Wall-clock times; the machine is shared, so medians are reported with the load average.
``--profile`` prints the cProfile of one round of the largest batch. The run exits 1 unless every
task it meant to finish did.
"""

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine_live import django_on_a_fresh_database  # noqa: E402


def build(tasks: int) -> list:
    """One pool of ample capacity with one worker, six policies on one profile, ``tasks`` waiting."""
    from apps.accounts.models import Group, User
    from apps.policies import services as policies
    from apps.pools.models import GpuType, Pool, Worker
    from apps.tasks.models import Task

    gpu = GpuType.objects.create(name="H100")
    pool = Pool.objects.create(name="pool", kind=Pool.Kind.BAREMETAL, gpu_type=gpu, capacity=100_000)
    worker = Worker.objects.create(pool=pool, hostname="node-1", token_hash="bench")
    profile = policies.create_profile(name="any", gpus=1, size_from_task=True, pools=[pool])
    org = Group.objects.create(name="Org", slug="org", kind="organisation")
    user = User.objects.create(username="bench")
    resources = []
    for q in range(6):
        group = Group.objects.create(name=f"q{q}", slug=f"q{q}", parent=org)
        policy = policies.create_policy(group=group, reservation=20, limit=100_000)
        resources.append(policies.connect(policy=policy, profile=profile, name=f"q{q}"))
    rows = Task.objects.bulk_create(
        Task(user=user, compute_resource=resources[i % 6], gpus=1 + i % 3, command="sleep 1", state="queued")
        for i in range(tasks)
    )
    for t in rows:
        t.queue_seq = t.pk
    Task.objects.bulk_update(rows, ["queue_seq"], batch_size=5000)
    return [pool, worker]


def loaded(ids, state):
    """The tasks as the engine's apply loads them (locked, with what ``place_many`` needs)."""
    from apps.tasks.models import Task

    return list(
        Task.objects.select_for_update(of=("self",))
        .select_related("compute_resource__policy", "compute_resource__profile")
        .filter(pk__in=ids, state__in=state)
        .order_by("pk")
    )


def timed(fn, *args, **kwargs) -> float:
    from django.db import transaction

    start = time.perf_counter()
    with transaction.atomic():
        fn(*args, **kwargs)
    return (time.perf_counter() - start) * 1000


def one_round(size: int, queued: list[int], pool, worker) -> dict:
    """Place, claim half, preempt all, report the claimed half stopped; then place, claim and
    start ``size`` others and finish them one by one. Returns ms per step."""
    from django.db import transaction
    from django.utils import timezone

    from apps.tasks import services as lifecycle

    out = {}
    batch, queued[:] = queued[:size], queued[size:]
    with transaction.atomic():
        tasks = loaded(batch, ["queued"])
        out["place_many"] = timed(lifecycle.place_many, [(t, pool) for t in tasks], timezone.now())
    with transaction.atomic():
        lifecycle.claim_many(worker, tasks[: size // 2], timezone.now())
    with transaction.atomic():
        tasks = loaded(batch, ["placed", "running"])
        out["request_stop_many"] = timed(lifecycle.request_stop_many, tasks, "reclaim", timezone.now())
    stopping = [t for t in tasks if t.state == "stopping"]
    with transaction.atomic():
        out["stopped_many"] = timed(lifecycle.stopped_many, stopping, timezone.now())
    queued.extend(batch)  # back in their queues
    done, queued[:] = queued[:size], queued[size:]
    with transaction.atomic():
        tasks = loaded(done, ["queued"])
        lifecycle.place_many([(t, pool) for t in tasks], timezone.now())
        lifecycle.claim_many(worker, tasks, timezone.now())
        for t in tasks:
            lifecycle.mark_started(t, timezone.now())
    total = 0.0
    for t in tasks:
        total += timed(lifecycle.finish, t, exit_code=0, at=timezone.now())
    out["finish (per task)"] = total / len(tasks)
    return out


def rewrite_verdicts(ids: list[int], turn: int) -> float:
    """The engine's verdict write for ``ids`` (waiting tasks), each round a different verdict: a
    rewrite of the ``verdict`` column alone, which PostgreSQL can do as a HOT update when the
    page has room."""
    from django.utils import timezone

    from apps.engine.apply import _store_verdicts

    verdict = {"rule": "no_capacity", "message": f"No room (round {turn}).", "key": f"room|{turn}"}
    return timed(_store_verdicts, [verdict], [(pk, 0, False) for pk in ids], timezone.now())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[50, 800])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--tasks", type=int, default=30_000, help="tasks in the estate")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--fillfactor",
        type=int,
        help="set tasks_task's fillfactor before the estate is built (default: the migrations')",
    )
    parser.add_argument(
        "--verdicts", type=int, default=10_000, help="waiting tasks whose verdict is rewritten"
    )
    parser.add_argument("--smoke", action="store_true", help="batches of 10 and 40, 2 rounds, 500 tasks")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(sizes=[10, 40], rounds=2, tasks=500, verdicts=200)
        args = parser.parse_args()
    django_on_a_fresh_database()
    from django.db import connection

    from apps.tasks.models import Task

    if args.fillfactor:
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE tasks_task SET (fillfactor = {int(args.fillfactor)})")
    pool, worker = build(args.tasks)
    queued = list(Task.objects.order_by("pk").values_list("pk", flat=True))
    with connection.cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'tasks_task'")
        options = cursor.fetchone()[0]
    load_before = os.getloadavg()[0]
    results = {}
    for size in args.sizes:
        one_round(size, queued, pool, worker)  # warm up
        rounds = [one_round(size, queued, pool, worker) for _ in range(args.rounds)]
        results[size] = {step: statistics.median(r[step] for r in rounds) for step in rounds[0]}
    verdict_ms = statistics.median(rewrite_verdicts(queued[: args.verdicts], i) for i in range(args.rounds))
    load_after = os.getloadavg()[0]
    print(
        f"{os.cpu_count()} cores; tasks_task options {options or 'default'}; {args.tasks} tasks; "
        f"{args.rounds} rounds; 1-minute load average {load_before:.1f} before, {load_after:.1f} after"
    )
    print("| batch | step | ms per batch (median) | ms per task |")
    print("|---|---|---|---|")
    for size, steps in results.items():
        for step, ms in steps.items():
            if step.startswith("finish"):
                print(f"| {size} | {step} | - | {ms:.2f} |")
            else:
                print(f"| {size} | {step} | {ms:.1f} | {ms / size:.3f} |")
    print(
        f"| {args.verdicts} | verdict rewrite (apply's ``_store_verdicts``) | {verdict_ms:.1f} | "
        f"{verdict_ms / args.verdicts:.3f} |"
    )
    if args.profile:
        profiler = cProfile.Profile()
        profiler.enable()
        one_round(max(args.sizes), queued, pool, worker)
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(45)
    meant = sum(size * (args.rounds + 1) for size in args.sizes) + (max(args.sizes) if args.profile else 0)
    finished = Task.objects.filter(state="succeeded").count()
    if finished != meant:
        sys.exit(f"{finished} tasks finished, {meant} meant to")


if __name__ == "__main__":
    main()
