"""The held snapshot (``apps.engine.held``) is the snapshot a full load reads: random streams of
submits, passes, finishes, cancels, verdict rewrites, task priority changes, estate edits (lending
settings too), deletes, prunes by another process and flushed change logs, each in a transaction of
its own, compared after every step with a fresh load at the same instant. Issue 35's: submits that
run after other tasks (held until they end, released or canceled by their ends, failures too),
capped arrays, and running work with time limits stopped at them and ended timed out. On the
embedded SQLite default and on PostgreSQL."""

import dataclasses
import random
import threading
from datetime import timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.db import connection, transaction
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from apps.accounts.models import Project
from apps.engine import changes, held, loader
from apps.engine.models import Change, ChangeEpoch
from apps.engine.services import _load_consistent, run_pass
from apps.policies.models import ComputeResource, ResourcePolicy
from apps.pools.models import Pool
from apps.tasks import services as tasks
from apps.tasks.models import Task
from tests.engine_live.test_crash_safety import churn_estate
from tests.factories import GroupFactory, UserFactory, WorkerFactory

pytestmark = pytest.mark.django_db(transaction=True)

STEPS = (
    "submit",
    "submit_many",
    "pass",
    "finish",
    "cancel",
    "stop",
    "verdicts",
    "pool",
    "policy",
    "priority",
    "task_priority",
    "sharing",
    "delete",
    "prune_elsewhere",
    "flush_log",
    "submit_after",
    "submit_array",
    "fail",
    "start",
    "stopped",
)


def _normal(loaded: loader.Loaded):
    keys = {
        group: {key: set(ids) for key, ids in stored.items()} for group, stored in loaded.verdict_keys.items()
    }
    return loaded.snapshot, keys, loaded.pool_names, loaded.group_names, loaded.held_keys


def assert_held_is_fresh() -> None:
    now = timezone.now()
    from_held = _load_consistent(now)
    fresh = loader.load(now)
    assert _normal(from_held) == _normal(fresh)


def _step(name: str, rng: random.Random, user, project) -> None:
    resources = list(ComputeResource.objects.order_by("pk"))
    now = timezone.now()
    if name == "submit":
        resource = rng.choice(resources)
        mine = project if resource.policy.group_id == project.group_id else None
        tasks.submit(user=user, compute_resource=resource, command="x", project=rng.choice([None, mine]))
    elif name == "submit_many":
        for _ in range(rng.randint(2, 6)):
            try:
                tasks.submit(
                    user=user, compute_resource=rng.choice(resources), command="x", nodes=rng.choice([1, 2])
                )
            except ValidationError:  # two nodes of the large profile fit no pool
                pass
    elif name == "pass":
        run_pass()
    elif name == "finish":
        for task in Task.objects.filter(state=Task.State.PLACED).order_by("?")[:2]:
            tasks.finish(task, exit_code=0, at=now)
    elif name == "cancel":
        for task in Task.objects.filter(state=Task.State.QUEUED).order_by("?")[:2]:
            tasks.cancel(task)
    elif name == "stop":
        tasks.request_stop_many(
            list(Task.objects.filter(state=Task.State.PLACED).order_by("?")[:1]), "reclaim", now
        )
    elif name == "verdicts":
        Task.objects.filter(
            state=Task.State.QUEUED, pk__in=Task.objects.order_by("?").values("pk")[:3]
        ).update(verdict={"key": f"test|{rng.randint(0, 2)}", "rule": "test"})
    elif name == "pool":
        Pool.objects.filter(pk=rng.choice(list(Pool.objects.values_list("pk", flat=True)))).update(
            capacity=Decimal(rng.randint(2, 8))
        )
    elif name == "policy":
        policy = ResourcePolicy.objects.order_by("?").first()
        ResourcePolicy.objects.filter(pk=policy.pk).update(limit=policy.limit + 1)
    elif name == "priority":
        Project.objects.filter(pk=project.pk).update(priority=rng.randint(1, 200))
    elif name == "task_priority":
        Task.objects.filter(pk__in=Task.objects.order_by("?").values("pk")[:3]).update(
            priority=rng.choice([-10, 0, 100, 200])
        )
    elif name == "sharing":
        policy = ResourcePolicy.objects.order_by("?").first()
        ResourcePolicy.objects.filter(pk=policy.pk).update(
            lending=rng.choice(["priority", "fair"]),
            over_quota_weight=Decimal(rng.randint(0, 3)),
            lendable=rng.choice([None, Decimal(0), policy.reservation]),
        )
    elif name == "delete":
        never_ran = Task.objects.filter(
            state=Task.State.QUEUED, intervals__isnull=True, dependant_links__isnull=True
        ).order_by("?")
        Task.objects.filter(pk__in=never_ran.values("pk")[:1]).delete()
    elif name == "prune_elsewhere":
        with transaction.atomic():
            position = changes.position()
        if position is not None:
            changes.prune(position)
    elif name == "flush_log":
        Change.objects.all().delete()
        ChangeEpoch.objects.all().delete()
    else:
        _issue_35_step(name, rng, user, resources, now)


def _issue_35_step(name: str, rng: random.Random, user, resources, now) -> None:
    if name == "submit_after":
        mine = list(Task.objects.filter(user=user).order_by("?").values_list("pk", flat=True)[:2])
        kind = rng.choice(["after_ok", "after_any"])
        try:
            tasks.submit(
                user=user,
                compute_resource=rng.choice(resources),
                command="x",
                time_limit_s=rng.choice([None, 1, 3600]),
                **{kind: mine},
            )
        except ValidationError:  # after_ok on a task that did not succeed
            pass
    elif name == "submit_array":
        tasks.submit_array(
            user=user,
            size=rng.randint(2, 4),
            max_running=rng.choice([None, 1, 2]),
            compute_resource=rng.choice(resources),
            command="x",
        )
    elif name == "fail":
        for task in Task.objects.filter(state=Task.State.PLACED).order_by("?")[:1]:
            tasks.finish(task, exit_code=1, at=now)
    elif name == "start":  # claimed and started a while ago: a limit of 1 s is past
        for task in Task.objects.filter(state=Task.State.PLACED, worker=None).order_by("?")[:2]:
            tasks.claim_many(WorkerFactory(pool=task.pool, gpus=64), [task], now)
            tasks.mark_started(Task.objects.get(pk=task.pk), now - timedelta(seconds=rng.choice([0, 5])))
    elif name == "stopped":
        tasks.stopped_many(list(Task.objects.filter(state=Task.State.STOPPING).order_by("?")[:2]), now)


@pytest.fixture
def estate():
    churn_estate()
    held.forget()
    held.before_pass()
    user = UserFactory()
    group = ResourcePolicy.objects.filter(limit=8).first().group
    return user, Project.objects.create(name="p", group=group, priority=50)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=10), seed=st.integers(0, 2**16))
def test_the_held_snapshot_is_what_a_full_load_reads_after_any_change_stream(estate, steps, seed):
    user, project = estate
    rng = random.Random(seed)
    for name in steps:
        _step(name, rng, user, project)
        held.before_pass()
        assert_held_is_fresh()


def test_task_changes_are_read_from_the_log_without_a_full_load(estate):
    """Rule: a pass after task changes only reads the changed tasks (the held snapshot is kept)."""
    user, _ = estate
    assert_held_is_fresh()
    first = held._held
    assert first is not None, "the change log is in use on this database"
    for _ in range(3):
        tasks.submit(user=user, compute_resource=ComputeResource.objects.first(), command="x")
        run_pass()
        assert_held_is_fresh()
    assert held._held is first and first.passes >= 3


def test_an_estate_change_or_a_prune_elsewhere_reads_everything_again(estate):
    """Rule: after an estate change, or once another process pruned what this one had not read,
    the next load reads everything (a new held snapshot)."""
    assert_held_is_fresh()
    before = held._held
    Pool.objects.update(capacity=Decimal(3))
    assert_held_is_fresh()
    assert held._held is not before
    before = held._held
    tasks.submit(user=UserFactory(), compute_resource=ComputeResource.objects.first(), command="x")
    with transaction.atomic():
        newer = changes.position()
    # Past what the held load read, whatever the cluster's oldest open transaction: on PostgreSQL
    # the floor is the snapshot's xmin, held back by any transaction open in any database.
    changes.prune(dataclasses.replace(newer, floor=max(newer.floor, before.position.floor + 1)))
    assert_held_is_fresh()
    assert held._held is not before


def test_every_trigger_is_installed():
    assert changes.supported()


def test_a_group_move_is_an_estate_change(estate):
    assert_held_is_fresh()
    before = held._held
    group = GroupFactory()
    assert_held_is_fresh()
    assert held._held is not before and group.pk


@pytest.mark.postgres
def test_a_change_committed_after_a_load_that_began_before_it_is_read_by_the_next_pass(estate):
    """Rule: transactions commit out of the order they began; a task written by a transaction
    still open at one load (invisible to it) is read by the next load once it has committed."""
    user, _ = estate
    assert_held_is_fresh()
    written, commit = threading.Event(), threading.Event()

    def writer():
        try:
            with transaction.atomic():
                tasks.submit(user=user, compute_resource=ComputeResource.objects.first(), command="late")
                written.set()
                assert commit.wait(30)
        finally:
            connection.close()

    thread = threading.Thread(target=writer)
    thread.start()
    assert written.wait(30)
    assert_held_is_fresh()
    kept = held._held
    commit.set()
    thread.join(30)
    assert_held_is_fresh()
    assert held._held is kept, "read from the log, not by a full load"
    assert Task.objects.filter(command="late").get().pk in kept.waiting
