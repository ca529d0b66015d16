"""A heartbeat never undoes what an idle check commits while it is being handled (the beat's
``check_idle`` runs on another Celery worker): the check runs in another thread, with its own
connection, at the moment the heartbeat's write of the session begins (a ``pre_save`` receiver;
no code of ours is replaced). Needs PostgreSQL: SQLite serialises the two writers."""

import threading
from datetime import timedelta

import pytest
from django.db import connection
from django.db.models.signals import pre_save

from apps.sessions import services
from apps.sessions.models import ProfileIdleLimits, Session
from apps.tasks.models import Task

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.postgres]


@pytest.mark.parametrize(
    ("checked_at", "expected", "stored"),
    [
        (600, {"warned": 0, "stopped": 1}, ("cpu", [])),
        (575, {"warned": 1, "stopped": 0}, ("", ["cpu"])),
    ],
    ids=["stop", "warning"],
)
def test_a_heartbeat_does_not_undo_an_idle_stop_or_warning_committed_meanwhile(
    estate, jupyter, running, worker, settings, checked_at, expected, stored
):
    settings.SESSION_IDLE_WARNING_S = 30
    ProfileIdleLimits.objects.create(profile=estate.vision_a100.profile, cpu_idle_s=600)
    task = running(
        services.start(user=estate.member, compute_resource=estate.vision_a100, session_kind=jupyter)
    )
    base = task.started_at
    sample = {"sampled_at": base, "cpu_percent": 0.5, "ready": True, "url": "http://gpu-1:1/sessions/1/"}
    services.record_samples(worker.worker, {task.pk: sample}, {task.pk}, base)
    checked = []

    def check_in_another_connection():
        try:
            checked.append(services.check_idle(base + timedelta(seconds=checked_at)))
        finally:
            connection.close()

    def during_the_heartbeats_write(sender, instance, **kwargs):
        if not checked:
            thread = threading.Thread(target=check_in_another_connection)
            thread.start()
            thread.join(timeout=30)

    pre_save.connect(during_the_heartbeats_write, sender=Session)
    try:
        later = {**sample, "sampled_at": base + timedelta(seconds=570)}
        services.record_samples(worker.worker, {task.pk: later}, {task.pk}, base + timedelta(seconds=601))
    finally:
        pre_save.disconnect(during_the_heartbeats_write, sender=Session)
    assert checked == [expected], checked
    task.refresh_from_db()
    assert task.state == (Task.State.STOPPING if expected["stopped"] else Task.State.RUNNING)
    row = Session.objects.get(pk=task.pk)
    assert (row.stopped_by, row.warned) == stored
    assert row.sampled_at == base + timedelta(seconds=570)  # the heartbeat's own write stands
