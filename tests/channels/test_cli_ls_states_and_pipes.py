"""``klique ls`` against a live server: every state the server has (the portal's words too), the
valid values named when one is unknown, and a reader that goes away (``| head``) ending it
quietly, as coreutils."""

import json
import os
import subprocess

import pytest

from apps.tasks.models import Task
from tests.channels.conftest import token_for
from tests.channels.live import KLIQUE, klique, logged_in

pytestmark = pytest.mark.django_db(transaction=True)

STATES = "queued, placed, running, stopping, succeeded, failed, canceled, timed_out, waiting, requeued, done"


@pytest.fixture
def env(live_server, estate, tmp_path):
    return logged_in(tmp_path, live_server.url, token_for(estate.member))


def submitted(env, name: str) -> int:
    result = klique(env, "submit", "vision/a100", "--name", name, "--json", "--", "train.py")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["id"]


def test_ls_takes_the_portals_states_requeued_waiting_and_done(env):
    fresh, again = submitted(env, "fresh"), submitted(env, "again")
    Task.objects.filter(pk=again).update(preemption_count=1)  # queued again after a preemption

    def ids(*states):
        args = [arg for state in states for arg in ("--state", state)]
        result = klique(env, "ls", *args, "--json")
        assert result.returncode == 0, result.stderr
        return {t["id"] for t in json.loads(result.stdout)}

    assert ids("requeued") == {again}
    assert ids("waiting") == {fresh}
    assert ids("queued") == {fresh, again}
    assert ids("done") == set()
    assert ids("requeued", "done") == {again}
    table = klique(env, "ls", "--state", "requeued")
    assert table.returncode == 0 and "again" in table.stdout and "fresh" not in table.stdout


def test_an_unknown_state_exits_5_listing_the_valid_ones(env):
    result = klique(env, "ls", "--state", "sleeping")
    assert result.returncode == 5
    assert f"state: Unknown state sleeping: use one of {STATES}." in result.stderr


def test_a_closed_standard_output_ends_ls_quietly_with_141(env):
    for n in range(3):
        submitted(env, f"task {n}")
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before klique writes, as `| head` after its lines
    try:
        process = subprocess.run(
            [KLIQUE, "ls"], env=env, stdout=write_end, stderr=subprocess.PIPE, timeout=60
        )
    finally:
        os.close(write_end)
    assert process.returncode == 141
    assert process.stderr == b""


def test_ls_piped_into_head_prints_its_first_lines_and_no_traceback(env):
    for n in range(3):
        submitted(env, f"task {n}")
    result = subprocess.run(
        ["bash", "-c", f"'{KLIQUE}' ls --limit 500 | head -n 1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.split()[:2] == ["ID", "STATE"]
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr
