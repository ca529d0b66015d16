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
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.engine_live import fresh_database  # noqa: E402

FINAL = "('succeeded', 'failed', 'canceled')"
SLURM_DIR = Path("/tmp/klique-slurm-bench")
HIGH_THROTTLES = {
    f"THROTTLE_{scope}": "1000000/min" for scope in ("WORKER", "HEARTBEAT", "WAIT", "SYNC", "ENROL")
}


@dataclass(frozen=True)
class Shape:
    """Kueue's cohorts as Klique sees them: per cohort one pool and ``queues`` policies."""

    name: str
    cohorts: int
    queues: int  # policies per cohort (Kueue's cluster queues)
    reservation: int  # Kueue's nominal quota
    limit: int  # nominal quota plus borrowing limit
    classes: tuple[tuple[int, int, float], ...]  # per policy: count, GPUs, run time (s)

    @property
    def pool_gpus(self) -> int:
        """A cohort's GPUs: the sum of its queues' nominal quotas."""
        return self.queues * self.reservation


BASELINE = Shape("baseline", 1, 6, 20, 120, ((350, 1, 0.2), (100, 5, 0.5), (50, 20, 1.0)))
LARGE = Shape("large", 20, 100, 20, 120, ((20, 1, 0.2), (7, 5, 0.5), (3, 20, 1.0)))
LARGE_SMOKE = replace(LARGE, cohorts=2, queues=4, classes=((4, 1, 0.2), (2, 5, 0.5), (1, 20, 1.0)))


def shape_for(name: str, cohorts: int | None, scale: float, smoke: bool) -> tuple[Shape, float]:
    """The shape to run and the share of each class's tasks that ``workload`` takes."""
    if name == "baseline":
        return replace(BASELINE, cohorts=cohorts or 1), scale
    if smoke:
        return LARGE_SMOKE, 1.0
    if round(LARGE.cohorts * scale) >= 1:
        return replace(LARGE, cohorts=min(LARGE.cohorts, round(LARGE.cohorts * scale))), 1.0
    return replace(LARGE, cohorts=1, queues=max(1, round(LARGE.cohorts * LARGE.queues * scale))), 1.0


def ideal_makespan_s(work, shape: Shape) -> float:
    """The quota-bound lower bound: the largest of each cohort's GPU-seconds over its pool's GPUs,
    each policy's over its limit (or the pool, if smaller), and the longest task."""
    per_cohort: dict[str, float] = {}
    bound = 0.0
    for name, tasks in work:
        seconds = sum(gpus * run for gpus, run in tasks)
        cohort = name.split("q", 1)[0]
        per_cohort[cohort] = per_cohort.get(cohort, 0.0) + seconds
        bound = max(bound, seconds / min(shape.limit, shape.pool_gpus), *(run for _, run in tasks))
    bound = max(bound, *(seconds / shape.pool_gpus for seconds in per_cohort.values()))
    return round(bound, 1)


def workload(shape: Shape, scale: float) -> list[tuple[str, list[tuple[int, float]]]]:
    """Per policy (its name, ``c<cohort>q<queue>``), the tasks in submission order: (GPUs, run time)."""
    out = []
    for c in range(shape.cohorts):
        for q in range(shape.queues):
            tasks = []
            for count, gpus, run in shape.classes:
                tasks += [(gpus, run)] * max(1, round(count * scale))
            out.append((f"c{c}q{q}", tasks))
    return out


# --- the estate ----------------------------------------------------------------------------------


def build_template(url: str, shape: Shape, secrets_file: Path) -> None:
    """Migrate and build the estate in ``url``; the raw tokens go to ``secrets_file``.

    Per cohort the pool, its profile and enrolment token, its department and its first policy (with
    its compute resource, user, membership and API token) go through the services and their rules;
    the cohort's other policies are the same values under the same department, with no parent
    policy whose sums they share, so they pass the same rules and are written in bulk (2,000
    policies one by one through the services take minutes)."""
    from django.core.management import call_command
    from django.db import connections, transaction
    from django.utils import timezone

    from apps.accounts import services as accounts
    from apps.accounts.models import ApiToken, Group, Membership, User
    from apps.policies import services as policies
    from apps.policies.models import ComputeResource, ResourcePolicy
    from apps.pools import services as pools
    from apps.pools.models import EnrolmentToken, GpuType, Pool

    call_command("migrate", verbosity=0)
    now = timezone.now()
    gpu = GpuType.objects.create(name="H100")
    org = Group.objects.create(name="Org", slug="org", kind="organisation")
    secrets = {"enrolment": {}, "api": {}}
    for c in range(shape.cohorts):
        with transaction.atomic():
            pool = Pool.objects.create(
                name=f"cohort{c}", kind=Pool.Kind.BAREMETAL, gpu_type=gpu, capacity=shape.pool_gpus
            )
            profile = policies.create_profile(name=f"cohort{c}", gpus=1, size_from_task=True, pools=[pool])
            token = pools.issue_enrolment_token(EnrolmentToken(pool=pool, name="bench"), now=now)
            secrets["enrolment"][pool.name] = token
            dept = Group.objects.create(name=f"Cohort {c}", slug=f"cohort{c}", parent=org, kind="department")
            names = [f"c{c}q{q}" for q in range(shape.queues)]
            first = names[0]
            group = Group.objects.create(name=first, slug=first, parent=dept)
            policy = policies.create_policy(group=group, reservation=shape.reservation, limit=shape.limit)
            resource = policies.connect(policy=policy, profile=profile, name=first)
            user = User.objects.create(username=first)
            accounts.add_membership(user=user, group=group, role=Membership.Role.MEMBER)
            secrets["api"][first] = accounts.create_api_token(user=user, name="bench")[1]
            rest = names[1:]
            if not rest:
                continue
            groups = Group.objects.bulk_create([Group(name=n, slug=n, parent=dept) for n in rest])
            made = ResourcePolicy.objects.bulk_create(
                [ResourcePolicy(group=g, reservation=policy.reservation, limit=policy.limit) for g in groups]
            )
            ComputeResource.objects.bulk_create(
                [
                    ComputeResource(name=n, policy=p, profile=profile, queuing_rank=resource.queuing_rank + i)
                    for i, (n, p) in enumerate(zip(rest, made, strict=True), start=1)
                ]
            )
            users = User.objects.bulk_create([User(username=n) for n in rest])
            Membership.objects.bulk_create(
                [
                    Membership(user=u, group=g, role=Membership.Role.MEMBER)
                    for u, g in zip(users, groups, strict=True)
                ]
            )
            tokens = []
            for n, u in zip(rest, users, strict=True):
                token, secrets["api"][n] = accounts.new_api_token(user=u, name="bench")
                tokens.append(token)
            ApiToken.objects.bulk_create(tokens)
    secrets_file.write_text(json.dumps(secrets))
    connections.close_all()


def clone(template_url: str, url: str) -> None:
    import psycopg

    name, template = url.rsplit("/", 1)[1], template_url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')


# --- CPU accounting from /proc -------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def _stat(pid: int) -> tuple[int, str, float] | None:
    """(parent pid, command, CPU seconds of the process and its reaped children)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    comm = raw[raw.index("(") + 1 : raw.rindex(")")]
    fields = raw.rsplit(")", 1)[1].split()
    return int(fields[1]), comm, sum(int(v) for v in fields[11:15]) / TICK


def processes() -> dict[int, tuple[int, str, float]]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (info := _stat(int(entry))):
            found[int(entry)] = info
    return found


def tree_cpu(procs, roots) -> float:
    """CPU seconds of the processes under ``roots`` (live ones and those they reaped)."""
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    total, stack, seen = 0.0, [r for r in roots if r in procs], set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        total += procs[pid][2]
        stack += children.get(pid, [])
    return total


def by_command(procs, names) -> list[int]:
    return [pid for pid, (_, comm, _) in procs.items() if comm in names]


def machine_busy_s() -> float:
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return (sum(fields[:8]) - idle) / TICK


class CpuMeter:
    """CPU seconds per group over a run; groups are root pids or command names."""

    def __init__(self, groups: dict[str, list[int] | set[str]]):
        self.groups = groups
        self.before = self.sample()

    def sample(self) -> dict[str, float]:
        procs = processes()
        out = {}
        for name, spec in self.groups.items():
            roots = by_command(procs, spec) if isinstance(spec, set) else spec
            out[name] = tree_cpu(procs, roots)
        out["machine"] = machine_busy_s()
        return out

    def done(self) -> dict[str, float]:
        after = self.sample()
        return {name: round(after[name] - self.before.get(name, 0.0), 1) for name in after}


def percentiles(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p90": None, "p99": None}
    values = sorted(values)

    def at(q):
        return round(values[min(len(values) - 1, round(q * (len(values) - 1)))], 3)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99)}


# --- Klique --------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(check, timeout_s: float, what: str, every: float = 0.2) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(every)


def sql(url: str, query: str, *params):
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(query, params).fetchall()


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
        proc = subprocess.Popen(cmd, cwd=ROOT, env=kw.pop("env", env), stdout=log, stderr=log, **kw)
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
        wait_until(lambda: _answers(port), 60, "gunicorn")
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
                daemons.append(
                    start(
                        [str(bin_dir / "klique-worker"), "--server", server, "--enrolment-token-file",
                         str(token_file), "--mode", "process", "--gpus", str(gpus), "--hostname",
                         f"{pool}-node{d}", "--state-dir", str(folder / f"{pool}-{d}")],
                        f"daemon-{pool}-{d}",
                        env=daemon_env,
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
        client0 = _self_cpu()
        t0, t_submitted, bulk = submit_all(server, secrets, work)
        deadline = time.monotonic() + args.timeout

        def finished() -> bool:
            done = sql(url, f"SELECT count(*) FROM tasks_task WHERE state IN {FINAL}")[0][0]
            if time.monotonic() > deadline:
                raise SystemExit(f"run {run_no}: only {done} of {total} tasks ended in {args.timeout} s")
            return done >= total

        wait_until(finished, args.timeout + 10, "the tasks to end", every=0.25)
        cpu = meter.done()
        cpu["bench client"] = round(_self_cpu() - client0, 1)
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


def daemons_per_pool(shape: Shape, asked: int) -> int:
    """``asked``, or more where a daemon would serve more GPUs than the worker API takes in one claim
    (``MAX_GPUS_PER_WORKER``: the large shape's 2,000-GPU pools run on two daemons of 1,000)."""
    from apps.pools.api.serializers import MAX_GPUS_PER_WORKER

    return max(asked, -(-shape.pool_gpus // MAX_GPUS_PER_WORKER))


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def _self_cpu() -> float:
    usage = os.times()
    return usage.user + usage.system


# --- Slurm ---------------------------------------------------------------------------------------


def start_slurm(shape: Shape) -> dict:
    gpus = shape.pool_gpus * shape.cohorts
    env = {**os.environ, "SLURM_DEV_GPUS": str(gpus), "SLURM_DEV_CPUS": str(gpus + 8)}
    subprocess.run([str(ROOT / "deploy/slurm-dev/stop.sh"), str(SLURM_DIR)], check=False, capture_output=True)
    shutil.rmtree(SLURM_DIR, ignore_errors=True)
    out = subprocess.run(
        [str(ROOT / "deploy/slurm-dev/start.sh"), str(SLURM_DIR)], env=env, capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(f"Slurm did not start: {out.stderr[-2000:]}")
    conf = out.stdout.strip().rsplit("SLURM_CONF=", 1)[1]
    return {**os.environ, "SLURM_CONF": conf}


def run_slurm(slurm_env: dict, work) -> dict:
    total = sum(len(tasks) for _, tasks in work)
    meter = CpuMeter({"slurm": {"slurmctld", "slurmd", "slurmstepd", "slurmdbd"}})

    def squeue_count() -> int:
        out = subprocess.run(["squeue", "-h", "-o", "%i"], env=slurm_env, capture_output=True, text=True)
        return len(out.stdout.split()) if out.returncode == 0 else 1

    t0 = time.time()
    for name, tasks in work:
        groups: dict[tuple[int, float], int] = {}
        for task in tasks:
            groups[task] = groups.get(task, 0) + 1
        for (gpus, run), count in groups.items():
            subprocess.run(
                ["sbatch", "--parsable", "-J", name, f"--gres=gpu:{gpus}", f"--array=0-{count - 1}",
                 "-o", "/dev/null", "-e", "/dev/null", "--wrap", f"sleep {run:g}"],
                env=slurm_env, check=True, capture_output=True,
            )  # fmt: skip
    submitted = time.time()
    wait_until(lambda: squeue_count() == 0, 3600, "Slurm's queue to empty", every=0.2)
    makespan = time.time() - t0
    cpu = meter.done()
    return {
        "system": "slurm",
        "tasks": total,
        "makespan_s": round(makespan, 1),
        "submit_s": round(submitted - t0, 2),
        "cpu_s": cpu,
        "load_1m": round(os.getloadavg()[0], 2),
    }


# --- main ----------------------------------------------------------------------------------------


def median_of(results: list[dict], key: str):
    values = [r[key] for r in results if r.get(key) is not None]
    return round(statistics.median(values), 2) if values else None


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
            subprocess.run([str(ROOT / "deploy/slurm-dev/stop.sh"), str(SLURM_DIR)], check=False)
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
