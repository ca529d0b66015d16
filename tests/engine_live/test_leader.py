"""Several engine processes, one active: the leader lock (``apps.engine.leader``), and each pass
naming the process that ran it."""

import os

import pytest
from django.db import connection

from apps.engine import leader, services
from apps.engine.leader import Leadership
from apps.engine.models import PassRecord


def one_leader_then_handover() -> None:
    """Two claims in one process: the first leads (and keeps leading), the second stands by until
    the first lets go, then leads, and the first stands by."""
    active, standby = Leadership(), Leadership()
    try:
        assert active.hold() and active.hold()
        assert not standby.hold()
        active.release()
        assert standby.hold()
        assert not active.hold()
    finally:
        active.release()
        standby.release()


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_rule_one_leader_at_a_time_and_a_standby_takes_over_when_it_lets_go():
    one_leader_then_handover()


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_rule_a_leader_whose_session_ends_stands_by_and_the_standby_takes_the_lock():
    """The session ends as when PostgreSQL restarts or a network drops it: the lock is freed."""
    active, standby = Leadership(), Leadership()
    try:
        assert active.hold()
        backend = active._conn.info.backend_pid
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s, 30000)", [backend])  # waits for its end
        assert standby.hold()
        assert not active.hold()  # its check fails: it stops leading
        assert not active.hold()  # a fresh connection finds the lock taken
        standby.release()
        assert active.hold()
    finally:
        active.release()
        standby.release()


def test_rule_one_leader_at_a_time_on_a_sqlite_file(monkeypatch, tmp_path):
    monkeypatch.setattr(leader, "lock_file_path", lambda suffix: str(tmp_path / f"db.{suffix}"))
    monkeypatch.setattr(leader.connection, "vendor", "sqlite")
    one_leader_then_handover()
    assert (tmp_path / "db.engine-leader").exists()


@pytest.mark.django_db
def test_rule_a_pass_record_names_the_process_that_ran_it():
    record = services.run_pass()
    assert record.runner == services.runner()
    assert PassRecord.objects.get(pk=record.pk).runner.endswith(f":{os.getpid()}")
