"""Saved what-if runs (docs/whatif.md, "Runs"): a period recorded on the database by the real
services and ``run_pass``, asked for with IT's changes, checked in full, run as a job (directly, in
a thread of the web process, or by a real Celery worker on queue ``whatif``) and stored with its
report, progress and errors."""

import os
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from apps.accounts.models import Group
from apps.whatif import runs, services
from apps.whatif.models import WhatIfRun
from apps.whatif.services import RunError
from tests.cloud_pools.conftest import wait_for
from tests.factories import GroupFactory, UserFactory
from tests.whatif.recorded import END, START, asked, assert_the_reservation_moved_the_waits, record
from tests.worker.live import ROOT, database_url

# -- the job --------------------------------------------------------------------------------


def test_a_run_of_a_recorded_period_stores_the_comparison_with_exact_figures(recorded, it):
    run = services.start_run(it, asked(title="  Vision +2 reserved  "))
    assert (run.state, run.progress, run.report, run.created_by, run.title) == (
        "queued",
        0.0,
        None,
        it,
        "Vision +2 reserved",
    )
    runs.execute(run.pk)
    run.refresh_from_db()
    assert_the_reservation_moved_the_waits(run)
    assert run.started_at <= run.finished_at
    # a finished run is not run again
    runs.execute(run.pk)
    assert WhatIfRun.objects.get(pk=run.pk).finished_at == run.finished_at


def test_a_run_scoped_to_a_group_replays_its_subtree_only(recorded, it):
    run = services.start_run(it, asked(groups=["agents"], changes={"capacities": {"onprem": 8}}))
    runs.execute(run.pk)
    run.refresh_from_db()
    assert run.state == "done", run.error
    assert run.tasks == 4
    assert list(run.report["base"]["groups"]) == ["agents"]
    assert run.report["changed"]["pools"]["onprem"]["utilization"] == 0.05


@pytest.mark.postgres
def test_progress_goes_from_0_to_1_and_never_back(recorded, it, monkeypatch):
    """Every write of the run's progress, recorded by a trigger on its table: the claim (0), the
    export (0.05), each side's start and end (the base side the first half of the rest, the changed
    side the second; below 1 while running), and 1 when done."""
    monkeypatch.setattr(runs, "PROGRESS_EVERY_S", 0.0)
    with connection.cursor() as cursor:
        cursor.execute("CREATE TEMPORARY TABLE progress_log (seq serial, state text, progress float)")
        cursor.execute(
            "CREATE FUNCTION pg_temp.log_progress() RETURNS trigger AS $$ BEGIN "
            "INSERT INTO progress_log (state, progress) VALUES (NEW.state, NEW.progress); RETURN NEW; "
            "END $$ LANGUAGE plpgsql"
        )
        cursor.execute(
            f"CREATE TRIGGER log_progress AFTER UPDATE ON {WhatIfRun._meta.db_table} "
            "FOR EACH ROW EXECUTE FUNCTION pg_temp.log_progress()"
        )
    run = services.start_run(it, asked())
    runs.execute(run.pk)
    with connection.cursor() as cursor:
        cursor.execute("SELECT state, progress FROM progress_log ORDER BY seq")
        writes = cursor.fetchall()
        cursor.execute(f"DROP TRIGGER log_progress ON {WhatIfRun._meta.db_table}")
    assert writes == [
        ("running", 0.0),
        ("running", 0.05),
        ("running", 0.05),
        ("running", 0.525),
        ("running", 0.525),
        ("running", 0.99),
        ("done", 1.0),
    ]
    progress = [p for _, p in writes]
    assert progress == sorted(progress)


def test_a_failed_export_or_comparison_stores_the_run_failed_with_the_message(recorded, it):
    """Checked when asked, a run can still fail when it runs: its group was deleted meanwhile (the
    export refuses the scope), or its changes no longer fit the estate (the comparison refuses)."""
    gone = GroupFactory(name="Gone", slug="gone")
    scoped = services.start_run(it, asked(groups=["gone"], changes={}))
    gone.delete()
    unknown = WhatIfRun.objects.create(start=START, end=END, changes={"reservations": {"nobody": 1}})
    for run in (scoped, unknown):
        runs.execute(run.pk)
        run.refresh_from_db()
    assert (scoped.state, scoped.error, scoped.report) == ("failed", "--groups: unknown group 'gone'", None)
    assert (unknown.state, unknown.error) == ("failed", "changes.reservations.nobody: unknown policy")
    assert unknown.finished_at is not None and unknown.progress < 1


# -- bad input ------------------------------------------------------------------------------

NOW = timezone.now()


@pytest.mark.parametrize(
    "overrides, field, reason",
    [
        ({"start": START.replace(tzinfo=None)}, "start", "needs a UTC offset"),
        ({"end": END.replace(tzinfo=None)}, "end", "needs a UTC offset"),
        ({"end": START}, "end", "must be later than start"),
        ({"end": START - timedelta(seconds=1)}, "end", "must be later than start"),
        (
            {"start": NOW - timedelta(hours=1), "end": NOW + timedelta(hours=1)},
            "end",
            "must not be in the future",
        ),
        ({"start": START - timedelta(days=3)}, "end", "at most 2 days"),
        ({"groups": ["nobody"]}, "groups", "unknown group 'nobody'"),
        ({"groups": "vision"}, "groups", "must be a list of group slugs"),
        ({"changes": {"capacity": {"onprem": 8}}}, "changes", "unknown kind 'capacity'"),
        ({"changes": ["reservations"]}, "changes", "must be an object"),
        ({"changes": {"reservations": {"nobody": 2}}}, "changes", "reservations.nobody: unknown policy"),
        ({"changes": {"limits": {"robotics": 2}}}, "changes", "limits.robotics: unknown policy"),
        (
            {"changes": {"reservations": {"vision": -1}}},
            "changes",
            "reservations.vision: must be >= 0, got -1",
        ),
        (
            {"changes": {"reservations": {"vision": "two"}}},
            "changes",
            "reservations.vision: must be a number",
        ),
        ({"changes": {"reservations": {"vision": 0.0005}}}, "changes", "must be a multiple of 0.001 GPU"),
        ({"changes": {"reservations": {"vision": 5}}}, "changes", "5 GPUs is above the limit of 4 GPUs"),
        ({"changes": {"capacities": {"onprem": True}}}, "changes", "capacities.onprem: must be a number"),
        ({"changes": {"budgets": {"vision": {"hours": 1}}}}, "changes", "budgets.vision.period: required"),
        (
            {"changes": {"pool_order": {"gpu": ["mars"]}}},
            "changes",
            "pool 'mars' is not in the profile's pools",
        ),
        ({"wait_threshold_s": -1}, "wait_threshold_s", "0 or more"),
        ({"wait_threshold_s": 1.5}, "wait_threshold_s", "whole number"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_nothing_is_saved(
    recorded, it, settings, overrides, field, reason
):
    settings.WHATIF_MAX_DAYS = 2
    with pytest.raises(RunError) as refused:
        services.start_run(it, asked(**overrides))
    assert refused.value.field == field
    assert reason in refused.value.message
    assert not WhatIfRun.objects.exists()


def test_a_group_scope_names_a_group_of_the_estate(recorded, it):
    """The scope's groups are checked against the groups as they stand: an existing slug passes."""
    assert Group.objects.filter(slug="vision").exists()
    services.check(asked(groups=["vision"]))


# -- stale runs -----------------------------------------------------------------------------


def test_only_running_runs_silent_past_the_stale_time_are_marked_failed(db, settings):
    settings.WHATIF_STALE_S = 900
    old = timezone.now() - timedelta(seconds=901)
    made = {
        name: WhatIfRun.objects.create(start=START, end=END, state=state, title=name)
        for name, state in [
            ("stale", "running"),
            ("fresh", "running"),
            ("queued-long", "queued"),
            ("done-long", "done"),
            ("failed-long", "failed"),
        ]
    }
    WhatIfRun.objects.exclude(title="fresh").update(updated_at=old)
    assert runs.fail_stale_runs() == 1
    states = dict(WhatIfRun.objects.values_list("title", "state"))
    assert states == {
        "stale": "failed",
        "fresh": "running",
        "queued-long": "queued",
        "done-long": "done",
        "failed-long": "failed",
    }
    stale = WhatIfRun.objects.get(pk=made["stale"].pk)
    assert stale.error.startswith("interrupted:") and stale.finished_at is not None
    assert runs.fail_stale_runs() == 0


# -- how a run is started -------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_inline_a_thread_of_the_web_process_runs_it_after_the_commit(settings):
    """Without a broker (WHATIF_INLINE): the job starts when the transaction that asked for it
    commits, in a thread, and the caller has the queued run at once."""
    record(settings)
    settings.WHATIF_INLINE = True
    it = UserFactory(username="root", is_superuser=True)
    with transaction.atomic():
        run = services.start_run(it, asked())
        assert WhatIfRun.objects.get(pk=run.pk).state == "queued"
    run = wait_for(
        lambda: WhatIfRun.objects.filter(pk=run.pk, state__in=["done", "failed"]).first(),
        timeout=60,
        what="the thread to finish the run",
    )
    assert_the_reservation_moved_the_waits(run)


@pytest.mark.postgres
@pytest.mark.redis
@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_of_queue_whatif_takes_the_run_and_finishes_it(settings):
    """A real worker (``celery -A klique worker -Q whatif``, as production runs it) on Redis,
    sharing this test's PostgreSQL, finishes the run queued at the commit."""
    import redis

    from klique.celery import app

    assert app.amqp.router.route({}, "klique.whatif.run")["queue"].name == "whatif"
    record(settings)
    settings.WHATIF_INLINE = False
    redis.Redis.from_url(settings.REDIS_URL).delete("whatif")
    env = os.environ | {
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "DJANGO_SETTINGS_MODULE": "klique.settings.base",
    }
    args = [sys.executable, "-m", "celery", "-A", "klique", "worker", "-Q", "whatif", "--concurrency", "1"]
    worker = subprocess.Popen(
        [*args, "--loglevel", "INFO"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        with transaction.atomic():
            run = services.start_run(UserFactory(username="root", is_superuser=True), asked())
        run = wait_for(
            lambda: WhatIfRun.objects.filter(pk=run.pk, state__in=["done", "failed"]).first(),
            timeout=90,
            what="the whatif worker to finish the run",
        )
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        output = worker.communicate(timeout=30)[0].decode()
    assert run.state == "done", (run.error, output[-3000:])
    assert_the_reservation_moved_the_waits(run)
    assert "klique.whatif.run" in output
