"""Benchmark of the live engine on PostgreSQL: passes timed inside ``run_pass`` and split into
load, decide and apply, with the queries per pass.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/klique_bench .venv/bin/python bench/engine_live.py
    DATABASE_URL=... .venv/bin/python bench/engine_live.py --shape kueue
    DATABASE_URL=... .venv/bin/python bench/engine_live.py --smoke     # a tiny estate, 3 passes of each kind

The database named in DATABASE_URL is dropped and created afresh. Shapes:

- ``live`` (the default): 10k waiting, 5k running, 500 policies and 50 pools; the build fills the
  estate with real passes, sends back what is over 5k and declares each pool's capacity as what it
  holds (a full estate).
- ``kueue``: Kueue's scheduler baseline, one cohort: one pool of 120 GPUs, 6 policies of
  reservation 20 and limit 120, per policy 350 tasks of 1 GPU, 100 of 5 and 50 of 20, all waiting.

Three kinds of pass are timed: the **first** pass after the build (for ``live`` it reclaims,
places and rewrites the verdicts of nearly every waiting task: the estate settles), **steady**
passes (nothing can move: the cost of looking; a pass that moves anything is reported in the
"moved" column) and **churn** passes (before each, ``--churn`` placed tasks finish, so the pass
places work and writes its events, intervals and the changed verdicts). Wall-clock times; the
machine is shared, so medians and p99 over the passes are reported with the load average. The
run exits 1 when neither the first pass nor a churn pass placed anything.
"""

import argparse
import os
import platform
import random
import statistics
import sys
import time
from decimal import Decimal
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def fresh_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')


def django_on_a_fresh_database() -> None:
    """Drop and create the PostgreSQL database of DATABASE_URL, set Django up on it, migrate."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("set DATABASE_URL to a PostgreSQL database that may be dropped (e.g. .../klique_bench)")
    fresh_database(url)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "klique.settings.base")
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


def build(waiting: int, running: int, n_policies: int, n_pools: int, seed: int = 7) -> None:
    from django.db.models import Sum
    from django.utils import timezone

    from apps.accounts.models import Group, User
    from apps.engine import services as engine
    from apps.policies.models import ComputeResource, Profile, ProfilePool, ResourcePolicy
    from apps.pools.models import GpuType, Pool
    from apps.tasks import services as lifecycle
    from apps.tasks.models import Task

    rng = random.Random(seed)
    gpu = GpuType.objects.create(name="H100")
    sizes = [1, 2, 4, 8]
    regions = 5
    per_pool = round(running * 2.5 / n_pools)
    pools = Pool.objects.bulk_create(
        Pool(name=f"pool-{i:03}", kind="kubernetes", multi_node=True, gpu_type=gpu, capacity=per_pool)
        for i in range(n_pools)
    )
    capacity = per_pool * n_pools
    profiles = Profile.objects.bulk_create(
        Profile(name=f"gpu-{s}-r{r}", gpus=s, time_weight=1) for s in sizes for r in range(regions)
    )
    links = []
    for f, profile in enumerate(profiles):
        region = [pool for i, pool in enumerate(pools) if i % regions == f % regions]
        shift = f % len(region)
        for rank, pool in enumerate(region[shift:] + region[:shift]):
            links.append(ProfilePool(profile=profile, pool=pool, pool_rank=rank))
    ProfilePool.objects.bulk_create(links)
    for pool in pools:
        for rank, link in enumerate(ProfilePool.objects.filter(pool=pool).order_by("profile_id")):
            link.profile_rank = rank
            link.save(update_fields=["profile_rank"])

    org = Group.objects.create(name="Org", slug="org", kind="organisation")
    top = ResourcePolicy.objects.create(group=org, reservation=int(capacity * 0.8), limit=capacity)
    teams = n_policies - 1
    groups = Group.objects.bulk_create(
        Group(name=f"team-{i:04}", slug=f"team-{i:04}", parent=org) for i in range(teams)
    )
    reservation = Decimal(int(capacity * 0.8) // teams)
    team_policies = ResourcePolicy.objects.bulk_create(
        ResourcePolicy(
            group=g,
            reservation=reservation,
            limit=min(capacity, reservation * 4 + 8),
            budget_hours=Decimal(100000) if i % 5 == 0 else None,
            budget_period="month" if i % 5 == 0 else "",
        )
        for i, g in enumerate(groups)
    )
    resources = ComputeResource.objects.bulk_create(
        ComputeResource(name=f"{p.group_id}/{f.name}", policy=p, profile=f, queuing_rank=i)
        for i, p in enumerate(team_policies)
        for f in rng.sample(profiles, 2)
    )
    user = User.objects.create(username="bench")
    now = timezone.now()
    tasks = Task.objects.bulk_create(
        Task(user=user, compute_resource=r, gpus=r.profile.gpus, command="sleep 600", state="queued")
        for r in (rng.choice(resources) for _ in range(waiting + running))
    )
    for t in tasks:
        t.queue_seq = t.pk
    Task.objects.bulk_update(tasks, ["queue_seq"], batch_size=5000)
    del top
    # Fill the estate with real passes, keep exactly `running` of the placed tasks (the others go
    # back to their queues) and declare each pool's capacity as what it holds: a full estate.
    while engine.run_pass(now=now).placed:
        pass
    extra = list(Task.objects.filter(state="placed").order_by("-placed_at", "-queue_seq")[running:])
    lifecycle.request_stop_many(extra, "reclaim", now)
    for pool in pools:
        held = Task.objects.filter(state="placed", pool=pool).aggregate(g=Sum("gpus"))["g"] or 0
        Pool.objects.filter(pk=pool.pk).update(capacity=held)


def build_kueue(cohort_policies: int = 6) -> None:
    """Kueue's baseline, one cohort, every task waiting (as ``bench/kueue_replay.py`` builds it)."""
    from apps.accounts.models import Group, User
    from apps.policies import services as policies
    from apps.pools.models import GpuType, Pool
    from apps.tasks.models import Task

    gpu = GpuType.objects.create(name="H100")
    pool = Pool.objects.create(name="cohort0", kind=Pool.Kind.BAREMETAL, gpu_type=gpu, capacity=120)
    profile = policies.create_profile(name="cohort0", gpus=1, size_from_task=True, pools=[pool])
    org = Group.objects.create(name="Org", slug="org", kind="organisation")
    dept = Group.objects.create(name="Cohort 0", slug="cohort0", parent=org, kind="department")
    user = User.objects.create(username="bench")
    rows = []
    for q in range(cohort_policies):
        group = Group.objects.create(name=f"c0q{q}", slug=f"c0q{q}", parent=dept)
        policy = policies.create_policy(group=group, reservation=20, limit=120)
        resource = policies.connect(policy=policy, profile=profile, name=f"c0q{q}")
        for count, gpus in ((350, 1), (100, 5), (50, 20)):
            rows += [
                Task(user=user, compute_resource=resource, gpus=gpus, command="sleep 1", state="queued")
                for _ in range(count)
            ]
    tasks = Task.objects.bulk_create(rows)
    for t in tasks:
        t.queue_seq = t.pk
    Task.objects.bulk_update(tasks, ["queue_seq"], batch_size=5000)


def churn(n: int, rng: random.Random) -> None:
    from django.utils import timezone

    from apps.tasks import services as lifecycle
    from apps.tasks.models import Task

    ids = list(Task.objects.filter(state="placed").values_list("pk", flat=True))
    for pk in rng.sample(ids, min(n, len(ids))):
        lifecycle.finish(Task.objects.get(pk=pk), exit_code=0, at=timezone.now())


def summarize(records) -> dict:
    def stats(values):
        values = sorted(values)
        p99 = values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]
        return statistics.median(values), p99

    out = {}
    for field in ("duration_ms", "load_ms", "decide_ms", "apply_ms"):
        out[field] = stats([getattr(r, field) for r in records])
    out["queries"] = stats([r.queries for r in records])
    out["placed"] = statistics.median(r.placed for r in records)
    out["moved"] = max(r.placed + r.preempted for r in records)
    out["verdicts"] = max(r.verdicts_changed for r in records)
    out["waiting"] = statistics.median(r.waiting for r in records)
    out["running"] = statistics.median(r.running for r in records)
    return out


def timed_passes():
    """``run_pass``, with the number of verdicts each pass wrote kept on its record (``Applied``
    has it, ``PassRecord`` does not)."""
    from apps.engine import apply as applier
    from apps.engine import services as engine

    written = []

    def apply(*args, **kwargs):
        applied = applier.apply(*args, **kwargs)
        written.append(applied.verdicts_changed)
        return applied

    engine.apply = apply

    def run():
        record = engine.run_pass()
        record.verdicts_changed = written.pop() if written else 0
        return record

    return run


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--shape", choices=("live", "kueue"), default="live")
    parser.add_argument("--waiting", type=int, default=10_000, help="live shape")
    parser.add_argument("--running", type=int, default=5_000, help="live shape")
    parser.add_argument("--policies", type=int, default=500, help="live shape")
    parser.add_argument("--pools", type=int, default=50, help="live shape")
    parser.add_argument("--passes", type=int, default=30, help="steady passes, and as many churn passes")
    parser.add_argument("--churn", type=int, help="tasks finished before each churn pass (live 50, kueue 10)")
    parser.add_argument("--smoke", action="store_true", help="300 waiting, 150 running, 20 policies, 5 pools")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(waiting=300, running=150, policies=20, pools=5, passes=3, churn=5)
        args = parser.parse_args()
    django_on_a_fresh_database()
    t0 = time.perf_counter()
    if args.shape == "kueue":
        build_kueue()
        churn_n = args.churn or 10
    else:
        build(args.waiting, args.running, args.policies, args.pools)
        churn_n = args.churn or 50
    print(f"estate built in {time.perf_counter() - t0:.1f} s")
    run_pass = timed_passes()
    rng = random.Random(11)
    load_before = os.getloadavg()[0]
    first = [run_pass()]
    steady = [run_pass() for _ in range(args.passes)]
    churned = []
    for _ in range(args.passes):
        churn(churn_n, rng)
        churned.append(run_pass())
    load_after = os.getloadavg()[0]
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"Python {platform.python_version()}, PostgreSQL; shape {args.shape}; "
        f"1-minute load average {load_before:.1f} at the first pass, {load_after:.1f} at the last"
    )
    header = [
        "pass",
        "waiting",
        "running",
        "placed",
        "moved (max)",
        "verdicts written (max)",
        "total ms (median / p99)",
        "load ms",
        "decide ms",
        "apply ms",
        "queries",
    ]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rows = (
        ("first (after the build)", first),
        (f"steady ({len(steady)})", steady),
        (f"churn ({len(churned)}, {churn_n} finish first)", churned),
    )
    for name, records in rows:
        s = summarize(records)
        cells = [name, f"{s['waiting']:.0f}", f"{s['running']:.0f}", f"{s['placed']:.0f}"]
        cells += [f"{s['moved']}", f"{s['verdicts']}"]
        cells += [
            f"{s[f][0]:.1f} / {s[f][1]:.1f}" for f in ("duration_ms", "load_ms", "decide_ms", "apply_ms")
        ]
        cells.append(f"{s['queries'][0]:.0f}")
        print("| " + " | ".join(cells) + " |")
    if not any(r.placed for r in first + churned):
        sys.exit("no pass placed anything")


if __name__ == "__main__":
    main()
