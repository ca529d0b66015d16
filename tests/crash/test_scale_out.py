"""Scale-out, shown with real processes: two gunicorn web processes behind nginx and two
``run_engine`` processes on one PostgreSQL, while a process submits over HTTP (through nginx) and
two real ``klique-worker`` daemons claim, run and report work on a pool of 4 GPUs.

One engine is active (it holds the leader lock, ``apps.engine.leader``), the other stands by. The
active one is SIGKILLed at random points of its loop, ``CRASH_KILLS`` times; each time the standby
must take over (its first pass after the kill is the takeover, measured and printed) and the
killed one is restarted to stand by. Then one web process is SIGKILLed and submissions must go on
through the other until it is back. After each kill every rule of the crash suite is checked
(``tests.crash.db``), which includes: never two passes at once, whichever process ran them. The
passes' runners must change hands exactly once per kill (one active engine at a time), then the
submissions stop, every task must end, and the whole history is checked again.
"""

import random
import shutil
import time
from datetime import UTC, datetime
from functools import partial

import pytest

from tests.conftest import _fail_or_skip
from tests.crash.stack import PASS_S, Process, Stack, wait_on_progress
from tests.crash.test_real_processes import KILLS, Marks, report
from tests.engine_live.test_concurrency import database_url

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]

RAN = "FROM engine_passrecord WHERE NOT skipped"


def runner_of(stack: Stack, process: Process) -> str:
    return f"{stack.host}:{process.process.pid}"


def active_one(stack: Stack, engines: list[Process]) -> tuple[Process, Process]:
    """(active, standby): the active one ran the latest pass."""
    latest = stack.query(f"SELECT runner {RAN} ORDER BY started_at DESC LIMIT 1")
    active = next(e for e in engines if runner_of(stack, e) == latest)
    return active, next(e for e in engines if e is not active)


def passes_by(stack: Stack, runner: str, since: datetime):
    """The first pass ``runner`` ran after ``since``; None before it runs one."""
    return stack.query(f"SELECT min(started_at) {RAN} AND runner = %s AND started_at > %s", runner, since)


def fail_over(stack: Stack, engines: list[Process], kills: int, rng: random.Random) -> list[float]:
    """Kill the active engine ``kills`` times at random points; the seconds each takeover took,
    from the kill to the standby's first pass."""
    takeovers = []
    for _ in range(kills):
        since, wanted = datetime.now(UTC), rng.randint(1, 3)
        wait_on_progress(
            lambda since=since, wanted=wanted: (
                stack.alive() and stack.passes_since(since, ran=True) >= wanted
            ),
            partial(stack.passes_since, since, ran=True),
            what=f"{wanted} passes of the active engine",
            stuck=lambda: engines[0].output() + engines[1].output(),
            every=0.05,
        )
        active, standby = active_one(stack, engines)
        time.sleep(rng.uniform(0, PASS_S))
        stack.alive()
        active.kill()
        killed = datetime.now(UTC)
        first = wait_on_progress(
            partial(passes_by, stack, runner_of(stack, standby), killed),
            what=f"the standby {standby.name} to take over",
            stuck=standby.output,
            every=0.02,
        )
        takeovers.append((first - killed).total_seconds())
        stack.check()
        restart_standing_by(active)
    return takeovers


def restart_standing_by(process: Process) -> None:
    """Restart a killed engine and wait until it stands by (a takeover measured later must not
    include a Python process starting)."""
    stood_by = process.log.read_text(errors="replace").count("engine standing by")
    process.start()
    wait_on_progress(
        lambda: process.log.read_text(errors="replace").count("engine standing by") > stood_by,
        what=f"{process.name} to stand by",
        stuck=process.output,
        every=0.05,
    )


def accepted(stack: Stack) -> int:
    return len(stack.accepted.read_text().split())


def web_fails_over(stack: Stack) -> int:
    """SIGKILL one web process: submissions go on through the other; restart it. How many were
    accepted while it was down."""
    web, before = stack.webs[1], accepted(stack)
    web.kill()
    wait_on_progress(
        lambda: accepted(stack) >= before + 5,
        partial(accepted, stack),
        what="submissions through the other web process",
        stuck=stack.nginx.output,
    )
    web.start()
    back = f"{web.name} back"
    wait_on_progress(lambda: web.alive() and stack.web_answers(web), what=back, stuck=web.output)
    return accepted(stack) - before


def test_two_engines_and_two_web_processes_behind_nginx_fail_over_one_active_engine_nothing_lost(folder):
    if not shutil.which("nginx"):
        _fail_or_skip("nginx is not installed (apt-get install nginx; CI's .ci/run does)")
    stack = Stack(folder, database_url(), seed=3, webs=2)
    try:
        mark = Marks()
        engines = [stack.start_engine(celery=False, name=name) for name in ("engine-a", "engine-b")]
        mark("start")
        takeovers = fail_over(stack, engines, KILLS, random.Random(13))
        mark("engine kills")
        while_down = web_fails_over(stack)
        stack.check()
        mark("web kill")
        runners = [r for (r,) in stack.rows(f"SELECT runner {RAN} ORDER BY started_at")]
        handovers = sum(1 for a, b in zip(runners, runners[1:], strict=False) if a != b)
        assert handovers == KILLS, f"one active engine at a time: {handovers} handovers for {KILLS} kills"
        figures = stack.drain()
        mark("drain")
        report("two engines + two web processes behind nginx", stack, figures, mark)
        print(f"takeovers (s): {[round(t, 3) for t in takeovers]}; accepted with one web down: {while_down}")
    finally:
        stack.close()
