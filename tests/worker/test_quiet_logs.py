"""At INFO the daemon logs one line per state change (enrolled, claimed, started, ended, the
control plane lost and back), never one per HTTP request: httpx logs each request at INFO, and
``klique-worker`` quiets it (docs/workers.md, "Logs")."""

import logging

import pytest

from apps.tasks.models import Task
from klique.worker.cli import CHATTY_LOGGERS, quiet_libraries
from tests.worker.conftest import run_until

pytestmark = pytest.mark.django_db


@pytest.fixture
def quiet():
    """The daemon's logging of ``klique-worker``, undone afterwards (the loggers are the process's)."""
    levels = {name: logging.getLogger(name).level for name in CHATTY_LOGGERS}
    quiet_libraries()
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def messages(caplog, logger="klique.worker"):
    return [(r.levelname, r.getMessage()) for r in caplog.records if r.name == logger]


def test_httpx_logs_each_request_at_info_unless_quieted(caplog, make_daemon, network):
    caplog.set_level(logging.INFO)
    # httpx's own level as a fresh process has it, whatever an earlier test in this one set
    caplog.set_level(logging.NOTSET, logger="httpx")
    daemon = make_daemon()
    daemon.tick()
    assert any(r.name == "httpx" and "HTTP Request" in r.getMessage() for r in caplog.records)


def test_a_sync_loop_at_info_logs_state_changes_and_no_request(
    caplog, quiet, make_daemon, network, pool, place
):
    caplog.set_level(logging.INFO)
    daemon = make_daemon()
    (task,) = place(pool)
    run_until(daemon, lambda: Task.objects.get(pk=task.pk).state == Task.State.SUCCEEDED)
    run_until(daemon, lambda: not daemon.held and not daemon.reports)
    for _ in range(20):  # idle ticks: heartbeats and claims, nothing to say about them
        daemon.tick()
    requests_before = network.requests
    network.down = True
    run_until(daemon, lambda: daemon.failures >= 3)
    network.down = False
    run_until(daemon, lambda: daemon.failures == 0)
    assert network.requests - requests_before >= 4

    assert not [r for r in caplog.records if r.name.startswith(("httpx", "httpcore"))]
    lines = messages(caplog)
    said = [message for _level, message in lines]
    assert said[0] == "enrolled"
    assert said.count("claimed") == said.count("started") == said.count("ended") == 1
    assert said.index("claimed") < said.index("started") < said.index("ended")
    # Three failed attempts in a row: one warning; the retries are debug lines.
    assert [line for line in lines if line[1] == "control plane unreachable"] == [
        ("WARNING", "control plane unreachable")
    ]
    assert said.count("control plane reachable again") == 1
    assert len(lines) == 6, lines
