"""Row locks never deadlock with the foreign-key checks PostgreSQL runs at commit.

Django's foreign keys are ``DEFERRABLE INITIALLY DEFERRED``: a transaction that inserted a task
event (or an interval, or set a task's worker) checks the referenced row at commit, with a
``FOR KEY SHARE`` lock. A sync holding that task ``FOR UPDATE`` and waiting for a row the first
transaction holds deadlocked with it (issue 31: one to five times a Kueue replay, some syncs
answered 500). Klique never changes a key, so every row lock it takes is ``FOR NO KEY UPDATE``,
which a key-share lock does not wait for."""

import ast
import threading
from pathlib import Path

import pytest
from django.db import OperationalError, connection, transaction
from django.utils import timezone

from apps.tasks.models import Task, TaskEvent
from tests.factories import ComputeResourceFactory, UserFactory

ROOT = Path(__file__).resolve().parents[2]


def _blocked_on_a_lock(timeout: float = 30.0) -> None:
    """Wait until another connection waits for a row lock."""
    deadline = timezone.now().timestamp() + timeout
    with connection.cursor() as cursor:
        while timezone.now().timestamp() < deadline:
            cursor.execute("SELECT pg_stat_clear_snapshot()")
            cursor.execute(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE wait_event_type = 'Lock' AND datname = current_database()"
            )
            if cursor.fetchone()[0]:
                return
    raise AssertionError("no connection waited for a lock")


def _race(no_key: bool) -> list[str]:
    """A sync locks task A then B; a report writes an event of A, updates B and commits."""
    user, resource = UserFactory(), ComputeResourceFactory()
    a, b = (
        Task.objects.create(user=user, compute_resource=resource, command="x", gpus=1, state="queued")
        for _ in "ab"
    )
    a_locked, b_updated, errors = threading.Event(), threading.Event(), []

    def sync():
        try:
            with transaction.atomic():
                Task.objects.select_for_update(no_key=no_key).get(pk=a.pk)
                a_locked.set()
                assert b_updated.wait(30)
                Task.objects.select_for_update(no_key=no_key).get(pk=b.pk)
        except (OperationalError, AssertionError) as error:
            errors.append(f"sync: {error!r}")
        finally:
            connection.close()

    def report():
        try:
            assert a_locked.wait(30)
            with transaction.atomic():
                TaskEvent.objects.create(task_id=a.pk, kind=TaskEvent.Kind.STARTED, at=timezone.now())
                Task.objects.filter(pk=b.pk).update(exit_code=0)
                b_updated.set()
                _blocked_on_a_lock()
        except (OperationalError, AssertionError) as error:
            errors.append(f"report: {error!r}")
        finally:
            connection.close()

    threads = [threading.Thread(target=sync), threading.Thread(target=report)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not any(thread.is_alive() for thread in threads)
    return errors


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_for_update_lock_deadlocks_with_a_commit_time_foreign_key_check():
    """The defect, reproduced: with plain FOR UPDATE one of the two is killed as a deadlock."""
    errors = _race(no_key=False)
    assert len(errors) == 1 and "deadlock detected" in errors[0], errors


@pytest.mark.django_db(transaction=True)
@pytest.mark.postgres
def test_a_no_key_update_lock_lets_both_commit():
    """Rule: row locks are FOR NO KEY UPDATE, and both transactions commit."""
    assert _race(no_key=True) == []


def test_every_row_lock_in_the_code_is_no_key():
    """Rule: every ``select_for_update`` in the apps and the worker passes ``no_key=True``, and
    the raw claim query locks ``FOR NO KEY UPDATE``."""
    offenders = []
    for path in [*ROOT.glob("apps/**/*.py"), *ROOT.glob("klique/**/*.py")]:
        if "/migrations/" in str(path):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "select_for_update":
                keywords = {k.arg: k.value for k in node.keywords}
                if not (
                    isinstance(keywords.get("no_key"), ast.Constant) and keywords["no_key"].value is True
                ):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
        text = path.read_text()
        if "FOR UPDATE" in text.replace("FOR NO KEY UPDATE", "") and "SKIP LOCKED" in text:
            offenders.append(f"{path.relative_to(ROOT)}: raw FOR UPDATE")
    assert offenders == []
