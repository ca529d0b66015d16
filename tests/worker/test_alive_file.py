"""Liveness files (docs/deploy.md, "Probes"): the worker daemon touches ``--alive-file`` while its
loop turns; a Celery worker touches ``KLIQUE_ALIVE_FILE`` from its timer (klique/liveness.py's
bootstep) and beat on each tick of its scheduler. The Helm chart's probes restart a process whose
file is over two minutes old."""

import os
import time

from celery.utils.timer2 import Timer

from klique.celery import app
from klique.liveness import Alive, AliveScheduler
from tests.worker.fakes import ScriptedControlPlane
from tests.worker.test_sync_loop import eventually, make, running


def test_the_daemon_touches_its_alive_file_while_its_loop_turns(tmp_path):
    alive = tmp_path / "alive"
    control = ScriptedControlPlane(time.monotonic, claims=[], heartbeat_s=5)
    daemon = make(control, tick_s=0.05, alive_file=str(alive))
    with running(daemon):
        eventually(alive.exists)
        first = alive.stat().st_mtime_ns
        os.utime(alive, ns=(first - 10**10, first - 10**10))  # ten seconds older
        eventually(lambda: alive.stat().st_mtime_ns >= first, timeout=15)


def test_the_daemon_without_an_alive_file_writes_none(tmp_path):
    daemon = make(ScriptedControlPlane(time.monotonic, claims=[], heartbeat_s=5), tick_s=0.05)
    with running(daemon):
        time.sleep(0.3)
    assert list(tmp_path.iterdir()) == []


def test_a_celery_worker_touches_the_alive_file_from_its_timer(tmp_path, monkeypatch):
    alive = tmp_path / "alive"
    monkeypatch.setenv("KLIQUE_ALIVE_FILE", str(alive))
    monkeypatch.setattr("klique.liveness.EVERY_S", 0.05)

    class Worker:  # what the bootstep uses of a celery WorkController: its timer
        timer = Timer()

    step = Alive(Worker)
    try:
        step.start(Worker)
        assert alive.exists()
        os.utime(alive, (0, 0))
        eventually(lambda: alive.stat().st_mtime > 0, timeout=5)
    finally:
        step.stop(Worker)
        Worker.timer.stop()
    assert "klique.liveness.Alive" in {f"{s.__module__}.{s.__name__}" for s in app.steps["worker"]}


def test_beat_touches_the_alive_file_on_each_tick_and_is_the_configured_scheduler(tmp_path, monkeypatch):
    alive = tmp_path / "alive"
    monkeypatch.setenv("KLIQUE_ALIVE_FILE", str(alive))
    scheduler = AliveScheduler(app=app, schedule_filename=str(tmp_path / "schedule"))
    try:
        scheduler.tick()
        assert alive.exists()
    finally:
        scheduler.close()
    assert app.conf.beat_scheduler == "klique.liveness:AliveScheduler"
