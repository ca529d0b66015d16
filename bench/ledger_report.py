"""Benchmark of the usage ledger's reports on PostgreSQL (docs/benchmarks.md, "Usage ledger").

It creates a fresh database, loads an estate and a year of usage intervals with COPY (psycopg 3
``cursor.copy``, not the ORM), builds the rollups with the real ``apps.ledger.rollups.refresh``,
then times, as finance sees them through ``apps.ledger.selectors.usage_report``:

* a month x group x GPU-type cut (a closed month, and the current month with its open hour), and
* a year x department cut,

each a median of ``--runs`` timed runs after one warm-up, and once the month cut read from the
intervals alone (no rollups), for the ratio. It drops the database at the end unless ``--keep``.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/klique_ledger_bench \\
        .venv/bin/python bench/ledger_report.py --intervals 10000000
    DATABASE_URL=... .venv/bin/python bench/ledger_report.py --smoke   # 5,000 intervals, 2 runs

The run exits 1 when the year's report comes out empty.
"""

import argparse
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import psycopg

ROOT = Path(__file__).resolve().parent.parent
YEAR = 2025
YEAR_START = datetime(YEAR, 1, 1, tzinfo=UTC)
NOW = datetime(YEAR, 12, 31, 23, 30, tzinfo=UTC)  # the ledger's "now": half an hour into the last hour
# (name, memory, time weight, price per GPU-hour from 1 January, price from 1 July)
GPU_TYPES = [
    ("A100-80GB", 80, "1", "2.10", "1.90"),
    ("H100", 80, "2", "3.40", "3.10"),
    ("L40S", 48, "0.5", "1.20", "1.20"),
    ("CPU", 0, "0", "0.00", "0.00"),
]
POOLS = [("onprem-a100", "A100-80GB", 2400), ("cloud-a100", "A100-80GB", 800), ("hpc-h100", "H100", 2000),
         ("cloud-h100", "H100", 800), ("baremetal-l40s", "L40S", 1200), ("edge-l40s", "L40S", 300),
         ("cpu-k8s", "CPU", 400), ("cpu-hpc", "CPU", 200)]  # fmt: skip
GPU_SIZES = ["0.25", "0.5", "1", "1", "1", "1", "2", "2", "4", "8"]
BUSINESS_UNITS, DEPARTMENTS_PER_UNIT, TEAMS_PER_DEPARTMENT = 4, 3, 4
USERS, PROJECTS_PER_TEAM = 2000, 3


def duration(rng: random.Random) -> timedelta:
    """Most GPU work is short, some runs for hours, a little for days (mean about 1.8 h)."""
    draw = rng.random()
    if draw < 0.45:
        seconds = rng.uniform(60, 1800)
    elif draw < 0.90:
        seconds = rng.uniform(1800, 3 * 3600)
    elif draw < 0.995:
        seconds = rng.uniform(3 * 3600, 12 * 3600)
    else:
        seconds = rng.uniform(12 * 3600, 3 * 86400)
    return timedelta(seconds=seconds, microseconds=rng.randrange(10**6))


def recreate_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    if "bench" not in name:
        sys.exit(f"refusing to drop {name!r}: the benchmark database name must contain 'bench'")
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    from django.db import connections

    connections.close_all()
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')


def make_estate():
    """Groups (1 organisation, 4 business units, 12 departments, 48 teams), a policy and a compute
    resource per team, 2000 users, 3 projects per team, 4 GPU types, 8 pools, prices that change
    on 1 July."""
    from apps.accounts import services as accounts
    from apps.accounts.models import Group, Membership, Project, User
    from apps.policies import services as policies
    from apps.pools import services as pools
    from apps.pricing import services as pricing

    org = accounts.create_group(name="Acme", slug="acme", kind=Group.Kind.ORGANISATION)
    teams = []
    for b in range(BUSINESS_UNITS):
        unit = accounts.create_group(
            name=f"Unit {b}", slug=f"unit-{b}", kind=Group.Kind.BUSINESS_UNIT, parent=org
        )
        for d in range(DEPARTMENTS_PER_UNIT):
            dept = accounts.create_group(
                name=f"Dept {b}.{d}", slug=f"dept-{b}-{d}", kind=Group.Kind.DEPARTMENT, parent=unit
            )
            for t in range(TEAMS_PER_DEPARTMENT):
                slug = f"team-{b}-{d}-{t}"
                teams.append(accounts.create_group(name=slug, slug=slug, kind=Group.Kind.TEAM, parent=dept))
    types = {}
    for name, memory, _, before, after in GPU_TYPES:
        types[name] = pools.create_gpu_type(name=name, memory_gb=memory)
        pricing.create_price(
            gpu_type=types[name], per_gpu_hour=before, effective_from=YEAR_START.date(), via="system"
        )
        pricing.create_price(
            gpu_type=types[name], per_gpu_hour=after, effective_from=datetime(YEAR, 7, 1).date(), via="system"
        )
    pool_objects = [
        pools.create_pool(name=name, kind="kubernetes", gpu_type=types[gpu_type], capacity=capacity)
        for name, gpu_type, capacity in POOLS
    ]
    profile = policies.create_profile(
        name="flex", gpus=Decimal(1), time_weight=Decimal(1), size_from_task=True, pools=pool_objects
    )
    resources = {}
    for team in teams:
        policy = policies.create_policy(group=team, reservation=0, limit=64)
        resources[team.pk] = policies.connect(policy=policy, profile=profile)
    User.objects.bulk_create(User(username=f"user{i}", password="!") for i in range(USERS))
    users = list(User.objects.order_by("pk"))
    team_of = {}
    for i, user in enumerate(users):
        team_of[user.pk] = teams[i % len(teams)]
    Membership.objects.bulk_create(Membership(user=u, group=team_of[u.pk], role="member") for u in users)
    finance = User.objects.create(username="finance", password="!")
    Membership.objects.create(user=finance, group=org, role=Membership.Role.FINANCE)
    projects = {team.pk: [None] for team in teams}
    for team in teams:
        for p in range(PROJECTS_PER_TEAM):
            projects[team.pk].append(Project.objects.create(group=team, name=f"project-{p}").pk)
    weights = {types[name].pk: Decimal(weight) for name, _, weight, _, _ in GPU_TYPES}
    return finance, users, team_of, resources, projects, pool_objects, weights


def load_intervals(count: int, seed: int) -> tuple[int, int]:
    """COPY ``count`` usage intervals (and the tasks they belong to) over the year: each task runs
    one to nine times (preempted and requeued in between), starting anywhere in the year."""
    from django.db import connection

    from apps.ledger.models import UsageInterval
    from apps.tasks.models import Task

    finance, users, team_of, resources, projects, pools, weights = make_estate()
    rng = random.Random(seed)
    capacities = [int(p.capacity) for p in pools]
    year_s = (NOW - YEAR_START).total_seconds()

    task_defaults = {
        f.attname: str(f.get_default()) if isinstance(f.get_default(), str) else f.get_default()
        for f in Task._meta.concrete_fields
        if not f.primary_key
    }
    task_fields = list(task_defaults)
    interval_fields = ["task_id", "user_id", "project_id", "policy_id", "group_id", "compute_resource_id",
                       "pool_id", "gpu_type_id", "gpus", "time_weight", "start", "end"]  # fmt: skip

    def copy(model, fields, rows):
        columns = ", ".join(f'"{model._meta.get_field(f).column}"' for f in fields)
        with (
            connection.cursor() as cursor,
            cursor.cursor.copy(f'COPY "{model._meta.db_table}" ({columns}) FROM STDIN') as stream,
        ):
            for row in rows:
                stream.write_row(row)

    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = replica")  # no FK triggers during the load
        cursor.execute("SELECT nextval(pg_get_serial_sequence('tasks_task', 'id'))")
        next_task = cursor.fetchone()[0]
    written = tasks = 0
    while written < count:
        task_rows, interval_rows = [], []
        while len(interval_rows) < 50_000 and written + len(interval_rows) < count:
            user = users[rng.randrange(len(users))]
            team = team_of[user.pk]
            resource = resources[team.pk]
            pool = rng.choices(pools, capacities)[0]
            gpus = Decimal(GPU_SIZES[rng.randrange(len(GPU_SIZES))])
            project = rng.choice(projects[team.pk])
            task_id = next_task + tasks
            at = YEAR_START + timedelta(seconds=rng.uniform(0, year_s))
            placements = 0
            for _ in range(rng.randint(1, 9)):
                if at >= NOW or written + len(interval_rows) >= count:
                    break
                end = at + duration(rng)
                running = end >= NOW
                interval_rows.append((task_id, user.pk, project, resource.policy_id, team.pk, resource.pk,
                                      pool.pk, pool.gpu_type_id, gpus, weights[pool.gpu_type_id], at,
                                      None if running else end))  # fmt: skip
                placements += 1
                if running:
                    break
                at = end + timedelta(seconds=rng.uniform(0, 1800))
            if not placements:
                continue
            values = dict(task_defaults, user_id=user.pk, project_id=project, compute_resource_id=resource.pk,
                          gpus=gpus, command="train.py", submitted_at=at, state="succeeded")  # fmt: skip
            values["spec"] = values["verdict"] = psycopg.types.json.Jsonb({})
            task_rows.append((task_id, *(values[f] for f in task_fields)))
            tasks += 1
        copy(Task, ["id", *task_fields], task_rows)
        copy(UsageInterval, interval_fields, interval_rows)
        written += len(interval_rows)
        print(f"\r  {written:,} intervals, {tasks:,} tasks", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    with connection.cursor() as cursor:
        cursor.execute("SET session_replication_role = DEFAULT")
        cursor.execute("SELECT setval(pg_get_serial_sequence('tasks_task', 'id'), %s)", [next_task + tasks])
        cursor.execute("ANALYZE")
    return written, tasks


def timed(function, runs: int) -> tuple[float, list[float]]:
    function()  # warm-up
    samples = []
    for _ in range(runs):
        began = time.perf_counter()
        function()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples), samples


def table_sizes() -> dict[str, tuple[int, str]]:
    from django.db import connection

    sizes = {}
    with connection.cursor() as cursor:
        for table in (
            "ledger_usageinterval",
            "ledger_hourlyrollup",
            "ledger_dailyrollup",
            "ledger_dailygrouprollup",
        ):
            cursor.execute(
                f"SELECT count(*), pg_size_pretty(pg_total_relation_size('{table}')) FROM {table}"  # noqa: S608
            )
            sizes[table] = cursor.fetchone()
    return sizes


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--intervals", type=int, default=10_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--keep", action="store_true", help="keep the database for a look afterwards")
    parser.add_argument("--reuse", action="store_true", help="time the cuts on a database kept by --keep")
    parser.add_argument("--smoke", action="store_true", help="5,000 intervals, 2 runs")
    args = parser.parse_args()
    if args.smoke:
        parser.set_defaults(intervals=5_000, runs=2)
        args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("postgres"):
        sys.exit("set DATABASE_URL=postgres://.../klique_ledger_bench")

    if not args.reuse:
        recreate_database(url)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "klique.settings.base")
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from apps.accounts.models import User
    from apps.ledger import rollups, selectors
    from apps.ledger.report_spec import ReportSpec
    from apps.ledger.selectors import usage_report

    try:
        if not args.reuse:
            call_command("migrate", verbosity=0)
            began = time.perf_counter()
            intervals, tasks = load_intervals(args.intervals, args.seed)
            print(
                f"\nintervals {intervals:,}, tasks {tasks:,}; load (COPY) {time.perf_counter() - began:.1f} s"
            )
            began = time.perf_counter()
            rows = rollups.refresh(NOW)
            print(f"rollups built from scratch: {rows:,} rows in {time.perf_counter() - began:.1f} s")
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")  # as autovacuum does after a bulk write
        refresh = timed(lambda: rollups.refresh(NOW + timedelta(minutes=1)), args.runs)[0]
        print(f"a refresh a minute later (recomputes the last closed hour), median: {refresh:.2f} s")

        finance = User.objects.get(username="finance")
        june = ReportSpec(
            ("group", "gpu_type"), datetime(YEAR, 6, 1, tzinfo=UTC), datetime(YEAR, 7, 1, tzinfo=UTC), "EUR"
        )
        december = ReportSpec(
            ("group", "gpu_type"),
            datetime(YEAR, 12, 1, tzinfo=UTC),
            datetime(YEAR + 1, 1, 1, tzinfo=UTC),
            "EUR",
        )
        year = ReportSpec(
            ("group",), YEAR_START, YEAR_START.replace(year=YEAR + 1), "EUR", level="department"
        )
        results = {
            "month x group x GPU type (June, closed)": timed(
                lambda: usage_report(finance, june, now=NOW), args.runs
            ),
            "month x group x GPU type (December, open hour)": timed(
                lambda: usage_report(finance, december, now=NOW), args.runs
            ),
            "year x department": timed(lambda: usage_report(finance, year, now=NOW), args.runs),
        }
        report = usage_report(finance, year, now=NOW)
        built = selectors.built_until
        selectors.built_until = lambda: None  # the same June cut, read from the intervals alone
        began = time.perf_counter()
        raw = usage_report(finance, june, now=NOW)
        raw_s = time.perf_counter() - began
        selectors.built_until = built
        assert raw.total == usage_report(finance, june, now=NOW).total, "rollups and intervals disagree"

        for table, (count, size) in table_sizes().items():
            print(f"  {table}: {count:,} rows, {size}")
        total = report.total
        print(f"year: {total.gpu_hours} GPU-hours, {total.cost_amount} EUR, {len(report.rows)} departments")
        print("\n| cut | median (s) | runs (s) |\n|---|---|---|")
        for name, (median, samples) in results.items():
            print(f"| {name} | {median:.3f} | {', '.join(f'{s:.3f}' for s in samples)} |")
        june_s = results["month x group x GPU type (June, closed)"][0]
        ratio = raw_s / june_s
        print(f"| June cut from the intervals alone (no rollups), once | {raw_s:.3f} | ratio {ratio:.0f}x |")
        if not report.rows or not total.gpu_hours:
            sys.exit("the year's report is empty")
    finally:
        if not args.keep:
            drop_database(url)


if __name__ == "__main__":
    main()
