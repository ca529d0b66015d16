"""Crash safety of the real processes. While a process submits over HTTP (gunicorn) and two real
``klique-worker`` daemons claim, run and report work on a pool of 4 GPUs:

* the ``run_engine`` loop is killed with SIGKILL at random points, restarted each time, then the
  test's own PostgreSQL cluster is crash-stopped (``pg_ctl -m immediate``) and started again;
* separately, the Celery worker running the pass (with beat, its whole process group) is killed
  the same way, then the test's own Redis (no persistence: its queues are lost) is restarted.

Each kill waits for passes begun by the restarted engine (their records), never for a guessed
time. After each kill every rule is checked in one snapshot of the database (``tests.crash.db``):
no task accepted over HTTP is lost, none is placed while it holds GPUs or claimed twice in one
placement, no pool's capacity is exceeded at any instant (from the usage intervals and, separately,
from the task events), an open interval for exactly the active tasks and none overlapping for one
task, every placement and preemption with its pass record, the meter equal to the intervals. After
each restart the engine must run passes that place work again. Then submissions stop, every task
must end (done or canceled) and the whole history is checked again. Every wait is on progress, not
a fixed time (``tests.crash.stack.wait_on_progress``): a loaded machine is slower, not stuck.

``CRASH_KILLS`` (default 4) sets the kills per test, for a longer soak.
"""

import os
import random
import time
from datetime import UTC, datetime

import pytest

from tests.crash.stack import Postgres, Redis, Stack
from tests.engine_live.test_concurrency import database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

KILLS = int(os.environ.get("CRASH_KILLS", "4"))


def report(what: str, stack: Stack, figures: dict, marks: dict[str, float]) -> None:
    refused = stack.submitter.log.read_text().count("submit:")
    took = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in marks.items())
    print(f"\n{what}: {KILLS} kills, {stack.checks} checks, {refused} submissions refused; {took}")
    print(f"{what}: {figures}")


class Marks(dict):
    """Seconds each phase took, for the report."""

    def __init__(self):
        super().__init__()
        self.last = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        self[name], self.last = now - self.last, now


def kill_restart_and_drain(stack: Stack, *, celery: bool, seed: int, restart, title: str) -> None:
    """The story both tests tell: start the engine, kill it at random points, restart a service
    under it, see the engine resume, check, drain, check again, and print the figures."""
    mark = Marks()
    stack.start_engine(celery=celery)
    mark("start")
    stack.kill_engine_at_random_points(KILLS, random.Random(seed))
    mark("kills")
    restarted = datetime.now(UTC)
    restart()
    stack.resumes(restarted)
    stack.check()
    mark("restart")
    figures = stack.drain()
    mark("drain")
    report(title, stack, figures, mark)


def test_the_engine_loop_killed_at_random_points_and_postgres_crash_restarted_lose_nothing(folder):
    postgres = Postgres()
    stack = None
    try:
        stack = Stack(folder, postgres.copy_database(database_url(), "klique"), seed=1)
        title = "run_engine loop + PostgreSQL restart"
        kill_restart_and_drain(stack, celery=False, seed=11, restart=postgres.crash_restart, title=title)
    finally:
        if stack:
            stack.close()
        postgres.remove()


@pytest.mark.redis
def test_the_celery_worker_with_beat_killed_at_random_points_and_redis_restarted_lose_nothing(folder):
    redis = Redis(folder)
    stack = None
    try:
        stack = Stack(folder, database_url(), redis_url=redis.url, seed=2)
        title = "Celery worker with beat + Redis restart"
        kill_restart_and_drain(stack, celery=True, seed=12, restart=redis.restart, title=title)
    finally:
        if stack:
            stack.close()
        redis.stop()
