"""Crash safety: the engine and the lifecycle are killed with SIGKILL at random points many times;
afterwards every task is in one consistent state, none is placed twice, no interval is left open
for stopped work, every applied pass has its record (and is counted in the running totals), and
budget use recomputed from the intervals equals what the meter reports.

Each kill waits for events from the process (it prints each step as it begins it), never for a
guessed time: a slow start on a loaded machine only delays the kill. The real processes (engine
loop, Celery, worker daemons, HTTP) are in tests/crash/test_real_processes.py."""

import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from decimal import Decimal

import pytest
from django.db.models import Count, Sum
from django.utils import timezone

from apps.core.gpus import to_milli
from apps.engine import core
from apps.engine.models import PassRecord, PassTotals
from apps.ledger.budgets import budget_status
from apps.ledger.models import UsageInterval
from apps.policies import services as policies
from apps.policies.models import ResourcePolicy
from apps.tasks.models import Task, TaskEvent
from klique.settings.base import BASE_DIR
from tests.engine_live.test_concurrency import database_url
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

KILLS = 25


def churn_estate():
    UserFactory(username="churn")
    pools = [PoolFactory(name="p1", capacity=6), PoolFactory(name="p2", capacity=4)]
    small = ProfileFactory(name="small", gpus=Decimal("0.5"), time_weight=1)
    large = ProfileFactory(name="large", gpus=2, time_weight=2)
    policies.link_pool(small, pools[0])
    policies.link_pool(small, pools[1])
    policies.link_pool(large, pools[1])
    org = policies.create_policy(group=GroupFactory(kind="organisation"), reservation=8, limit=10)
    teams = [
        policies.create_policy(
            group=GroupFactory(parent=org.group),
            reservation=4,
            limit=8,
            budget_hours="0.05",
            budget_period="day",
        ),
        policies.create_policy(group=GroupFactory(parent=org.group), reservation=2, limit=10),
    ]
    for team in teams:
        policies.connect(policy=team, profile=small)
        policies.connect(policy=team, profile=large)
    return pools


def check_consistency():
    open_by_task = defaultdict(int)
    for task_id in UsageInterval.objects.filter(end__isnull=True).values_list("task_id", flat=True):
        open_by_task[task_id] += 1
    for task in Task.objects.all():
        expected = 1 if task.state in Task.ACTIVE_STATES else 0
        assert open_by_task.get(task.pk, 0) == expected, (task.pk, task.state, open_by_task.get(task.pk))
    by_task = defaultdict(list)
    for interval in UsageInterval.objects.order_by("start", "pk"):
        by_task[interval.task_id].append(interval)
    for intervals in by_task.values():
        for earlier, later in zip(intervals, intervals[1:], strict=False):
            assert earlier.end is not None and earlier.end <= later.start, "a task placed twice at once"
    # Stopping work counts for no room (docs/engine.md, "Usage"): its worker frees the GPUs first.
    held = defaultdict(Decimal)
    open_intervals = UsageInterval.objects.filter(end__isnull=True).exclude(task__state=Task.State.STOPPING)
    for interval in open_intervals.select_related("pool"):
        held[interval.pool] += interval.gpus
    for pool, gpus in held.items():
        assert gpus <= pool.capacity, f"{pool} holds {gpus} of {pool.capacity}"


def check_every_applied_pass_is_recorded():
    """Only the pass places and preempts here (the churn submits, cancels and finishes): the
    records of the passes must account for every placement and preemption the database holds."""
    records = PassRecord.objects.filter(skipped=False)
    totals = records.aggregate(placed=Sum("placed"), preempted=Sum("preempted"))
    events = TaskEvent.objects.values("kind").annotate(n=Count("pk")).order_by()
    counted = {row["kind"]: row["n"] for row in events}
    assert (totals["placed"] or 0) == counted.get(TaskEvent.Kind.PLACED, 0)
    assert (totals["preempted"] or 0) == counted.get(TaskEvent.Kind.PREEMPTED, 0)
    ran = PassTotals.objects.filter(name=PassTotals.RAN).first()
    assert (ran.count if ran else 0) == records.count()


def check_meter_against_intervals():
    now = timezone.now()
    budgeted = list(ResourcePolicy.objects.filter(budget_hours__isnull=False))
    reported = budget_status(budgeted, now=now)
    for policy in budgeted:
        intervals = [
            core.UsageInterval(start=i.start, end=i.end, weight=to_milli(i.time_weight))
            for i in UsageInterval.objects.filter(policy=policy)
        ]
        units = core.budget_used(intervals, now, policy.budget_period)
        assert reported[policy.pk].used_hours == (Decimal(units) / core.UNITS_PER_HOUR).quantize(
            Decimal("0.001")
        )


class Steps:
    """The step lines a churn process prints, read as they come."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.passes = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.process.stdout:
            self.lines.put(line.decode().strip())
        self.lines.put(None)

    def next(self, timeout: float = 120) -> str:
        """The next step begun; fails if the process ends or begins nothing for ``timeout`` s."""
        try:
            step = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the churn process began no step in {timeout} s") from None
        if step is None:
            raise AssertionError(f"the churn process ended: {self.process.stderr.read().decode()[-3000:]}")
        self.passes += step == "pass"
        return step


def test_sigkill_at_random_points_after_a_pass_has_begun_leaves_a_consistent_state():
    churn_estate()
    env = os.environ | {"DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "klique.settings.base"}
    rng = random.Random(20261202)
    for kill in range(KILLS):
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.engine_live.churn", str(kill)],
            cwd=BASE_DIR,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        steps = Steps(process)
        while steps.next() != "pass":
            pass
        for _ in range(rng.randint(0, 8)):
            steps.next()
        time.sleep(rng.uniform(0, 0.02))  # somewhere inside the step begun, not only at its start
        assert process.poll() is None, process.stderr.read().decode()[-3000:]
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
        assert steps.passes >= 1, "killed before a pass had begun"
        check_consistency()
        check_every_applied_pass_is_recorded()
    assert PassRecord.objects.filter(skipped=False, placed__gt=0).exists()
    check_meter_against_intervals()
    assert Task.objects.count() > 50
    assert UsageInterval.objects.count() > 20
