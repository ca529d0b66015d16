"""The held snapshot's rule "own verdicts are not read back" (``apps.engine.held``): the verdicts a
pass writes are taken from the pass, not read again from the change log, and a task changed by
anyone else (or by another statement of the pass) is still read. PostgreSQL only: the rule keys on
the writing transaction's id."""

import threading

import pytest
from django.db import connection, transaction

from apps.engine import core, held
from apps.engine.services import run_pass
from apps.policies.models import ComputeResource
from apps.tasks import services as tasks
from apps.tasks.models import Task
from tests.engine_live.test_crash_safety import churn_estate
from tests.engine_live.test_held_snapshot import assert_held_is_fresh
from tests.factories import UserFactory

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.fixture
def waiting():
    """An estate with more work waiting than fits, every waiting task's stored verdict stale (so the
    next pass rewrites them all), and a held snapshot that has read it."""
    churn_estate()
    held.forget()
    held.before_pass()
    user = UserFactory()
    resources = list(ComputeResource.objects.order_by("pk"))
    for i in range(24):
        tasks.submit(user=user, compute_resource=resources[i % len(resources)], command="x")
    run_pass()
    Task.objects.filter(state=Task.State.QUEUED).update(verdict={"key": "stale", "rule": "stale"})
    assert_held_is_fresh()
    assert held._held is not None


def _rows_read(monkeypatch) -> list[int]:
    read: list[int] = []
    take = held.Held.take

    def spy(self, rows):
        read.extend(row[0] for row in rows)
        return take(self, rows)

    monkeypatch.setattr(held.Held, "take", spy)
    return read


def test_own_verdicts_are_not_read_back(waiting, monkeypatch):
    """Rule "own verdicts are not read back": the pass rewrote every waiting task's verdict; the next
    load reads none of them from the log, and its snapshot is still what a full load reads."""
    kept = held._held
    queued = set(Task.objects.filter(state=Task.State.QUEUED).values_list("pk", flat=True))
    run_pass()
    rewritten = queued & set(Task.objects.exclude(verdict__key="stale").values_list("pk", flat=True))
    assert len(rewritten) > 5
    read = _rows_read(monkeypatch)
    assert_held_is_fresh()
    assert held._held is kept
    assert not rewritten & set(read)


def test_an_outside_write_to_a_row_the_pass_rewrites_is_still_read(waiting, monkeypatch):
    """Rule "own verdicts are not read back", its limit: another transaction changes a task between
    the pass's load and its apply (the same moment the pass rewrites that task's verdict); the next
    load reads that task again, and the snapshot has the other transaction's change."""
    target = Task.objects.filter(state=Task.State.QUEUED).order_by("pk").first()
    allocate = core.allocate

    def outside_write():
        try:
            with transaction.atomic():
                Task.objects.filter(pk=target.pk).update(priority=target.priority + 7)
        finally:
            connection.close()

    def allocate_while_another_writes(snapshot):
        decisions = allocate(snapshot)
        thread = threading.Thread(target=outside_write)
        thread.start()
        thread.join(30)
        return decisions

    monkeypatch.setattr(core, "allocate", allocate_while_another_writes)
    run_pass()
    monkeypatch.setattr(core, "allocate", allocate)
    target.refresh_from_db()
    assert target.state == Task.State.QUEUED and target.verdict["key"] != "stale", "the pass rewrote it"
    read = _rows_read(monkeypatch)
    assert_held_is_fresh()
    assert target.pk in read
    assert held._held.waiting[target.pk][9] == target.priority


def test_a_task_changed_by_another_statement_of_the_same_transaction_is_read(waiting, monkeypatch):
    """Rule "own verdicts are not read back", its limit: a task the engine's transaction changed
    with another statement too (its priority, then its verdict) is read again, not taken from the
    verdict alone."""
    target = Task.objects.filter(state=Task.State.QUEUED).order_by("pk").first()
    with transaction.atomic():
        Task.objects.filter(pk=target.pk).update(priority=target.priority + 3)
        Task.objects.filter(pk=target.pk).update(verdict={"key": "own", "rule": "own"})
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_current_xact_id()::text::bigint")
            held.wrote_verdicts(cursor.fetchone()[0], {target.pk: "own"})
    read = _rows_read(monkeypatch)
    assert_held_is_fresh()
    assert target.pk in read
    assert held._held.waiting[target.pk][9] == target.priority + 3
