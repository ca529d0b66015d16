"""Issue 34 on the database: the loader and the held snapshot carry a policy's lending rule,
over-quota weight and lendable part, a profile's starvation guard and each task's priority and
waiting time into the core's snapshot; a queue comes out higher priority first, then in queue
order; a priority change reaches the held snapshot from the change log. The scenario replay
(``db_scenario.DatabaseReplay``) carries every new scenario field onto the database."""

import importlib
import json
from decimal import Decimal

import pytest
from django.apps import apps as django_apps
from django.utils import timezone

from apps.engine import held, loader
from apps.engine.core import scenario as scenarios
from apps.policies import services as policies
from apps.policies.models import ComputeResource, PriorityClass, Profile, ResourcePolicy
from apps.tasks import services as tasks
from apps.tasks.models import Task
from tests.engine_live.db_scenario import DatabaseReplay
from tests.engine_live.test_held_snapshot import assert_held_is_fresh
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory


@pytest.fixture
def estate(db):
    pool = PoolFactory(name="onprem", capacity=8)
    profile = ProfileFactory(name="gpu-1", gpus=1)
    policies.link_pool(profile, pool)
    dept = policies.create_policy(group=GroupFactory(name="Dept", slug="dept"), reservation=6, limit=8)
    team = policies.create_policy(
        group=GroupFactory(name="Team", slug="team", parent=dept.group), reservation=4, limit=8
    )
    return profile, dept, team, policies.connect(policy=team, profile=profile)


def _policy(snapshot, policy):
    return next(p for p in snapshot.policies if p.id == str(policy.pk))


def _submit(resource, priority, user):
    return tasks.submit(user=user, compute_resource=resource, command="x", priority=priority)


def test_the_migration_names_the_priority_classes_low_normal_and_high(db):
    # The data migration's own function, run again: a transactional test elsewhere may have flushed
    # what migrating wrote.
    seed = importlib.import_module("apps.policies.migrations.0008_fair_lending_and_priority")
    PriorityClass.objects.all().delete()
    seed.create_classes(django_apps, None)
    assert list(PriorityClass.objects.values_list("name", "value")) == [
        ("high", 200),
        ("normal", 100),
        ("low", 0),
    ]


def test_new_settings_default_to_the_rules_before_issue_34_except_the_starvation_guard(estate):
    profile, dept, team, _ = estate
    snapshot = loader.load(timezone.now()).snapshot
    assert (_policy(snapshot, team).lending, _policy(snapshot, team).over_quota_weight) == ("priority", 1000)
    assert _policy(snapshot, team).lendable is None
    assert next(f for f in snapshot.profiles if f.id == str(profile.pk)).starvation_s == 600


def test_the_loader_carries_lending_weight_lendable_and_the_starvation_guard(estate):
    profile, dept, team, _ = estate
    policies.update_policy(dept, lending="fair")
    policies.update_policy(team, over_quota_weight=Decimal("2.5"), lendable=Decimal("1.5"))
    policies.update_profile(profile, starvation_s=None)
    snapshot = loader.load(timezone.now()).snapshot
    assert _policy(snapshot, dept).lending == "fair"
    assert (_policy(snapshot, team).over_quota_weight, _policy(snapshot, team).lendable) == (2500, 1500)
    assert next(f for f in snapshot.profiles if f.id == str(profile.pk)).starvation_s is None


def test_a_queue_is_loaded_higher_priority_first_then_in_queue_order_with_its_submit_time(estate):
    *_, resource = estate
    user = UserFactory()
    low, high, normal, high_later = (_submit(resource, p, user) for p in (0, 200, 100, 200))
    queue = loader.load(timezone.now()).snapshot.waiting[str(resource.pk)]
    assert [t.id for t in queue] == [str(t.pk) for t in (high, high_later, normal, low)]
    assert [t.priority for t in queue] == [200, 200, 100, 0]
    assert [t.since for t in queue] == [
        Task.objects.get(pk=t.pk).submitted_at for t in (high, high_later, normal, low)
    ]


def test_placed_work_carries_its_priority(estate):
    *_, resource = estate
    task = _submit(resource, 150, UserFactory())
    Task.objects.filter(pk=task.pk).update(state=Task.State.PLACED, pool_id=resource.profile.pools.get().pk)
    Task.objects.filter(pk=task.pk).update(placed_at=timezone.now())
    placed = loader.load(timezone.now()).snapshot.placed
    assert [(p.id, p.priority) for p in placed] == [(str(task.pk), 150)]


@pytest.mark.django_db(transaction=True)
def test_a_priority_change_reaches_the_held_snapshot_from_the_change_log():
    pool = PoolFactory(name="onprem", capacity=8)
    profile = ProfileFactory(name="gpu-1", gpus=1)
    policies.link_pool(profile, pool)
    policy = policies.create_policy(group=GroupFactory(name="Team", slug="team"), reservation=0, limit=8)
    resource = policies.connect(policy=policy, profile=profile)
    user = UserFactory()
    first, second = _submit(resource, 0, user), _submit(resource, 0, user)
    held.forget()
    held.before_pass()
    assert_held_is_fresh()
    kept = held._held
    assert kept is not None, "the change log is in use on this database"
    Task.objects.filter(pk=second.pk).update(priority=10)
    assert_held_is_fresh()
    assert held._held is kept, "a task's priority is read from the log, without a full load"
    queue = held._held.tasks().waiting[str(resource.pk)]
    assert [(t.id, t.priority) for t in queue] == [(str(second.pk), 10), (str(first.pk), 0)]
    ResourcePolicy.objects.filter(pk=policy.pk).update(lendable=Decimal(0), over_quota_weight=3)
    Profile.objects.filter(pk=profile.pk).update(starvation_s=60)
    ComputeResource.objects.filter(pk=resource.pk).update(default_priority=5)
    assert_held_is_fresh()
    assert held._held is not kept, "a lending setting is an estate change: everything is read again"
    assert held._held.estate.policy_base[0].lendable == 0


INLINE = {
    "description": "Every issue-34 field of a scenario, carried onto the database.",
    "start": "2025-01-06T00:00:00Z",
    "duration_s": 4,
    "pools": [{"name": "onprem", "capacity": 4}],
    "profiles": [
        {"name": "any", "gpus": 1, "size_from_task": True, "pools": ["onprem"], "starvation_s": 120},
        {"name": "plain", "gpus": 1, "pools": ["onprem"]},
    ],
    "policies": [
        {"name": "dept", "reservation": 4, "limit": 4, "lending": "fair", "lendable": 1},
        {"name": "a", "parent": "dept", "reservation": 1, "limit": 4, "over_quota_weight": 3},
        {"name": "b", "parent": "dept", "reservation": 1, "limit": 4},
    ],
    "compute_resources": [
        {"name": "ra", "policy": "a", "profile": "any"},
        {"name": "rb", "policy": "b", "profile": "plain"},
    ],
    "events": [
        {"at": 0, "submit": {"id": "lo", "resource": "ra", "gpus": 1, "duration_s": 2}},
        {"at": 0, "submit": {"id": "hi", "resource": "ra", "gpus": 1, "duration_s": 2, "priority": 200}},
        {"at": 0, "submit": {"id": "neg", "resource": "rb", "gpus": 1, "duration_s": 2, "priority": -5}},
    ],
}


def test_the_scenario_replay_carries_every_new_field_onto_the_database(db, settings):
    sc = scenarios.loads(json.dumps(INLINE))
    settings.LOW_WATERMARK_S = sc.low_watermark_s
    replay = DatabaseReplay(sc)
    replay.run(until_us=0)
    dept, a, b = (ResourcePolicy.objects.get(group__slug=slug) for slug in ("dept", "a", "b"))
    assert (dept.lending, dept.lendable, dept.over_quota_weight) == ("fair", Decimal(1), Decimal(1))
    assert (a.lending, a.lendable, a.over_quota_weight) == ("priority", None, Decimal(3))
    assert b.over_quota_weight == Decimal(1)
    assert dict(Profile.objects.values_list("name", "starvation_s")) == {"any": 120, "plain": None}
    assert {replay.ids[pk]: priority for pk, priority in Task.objects.values_list("pk", "priority")} == {
        "lo": 0,
        "hi": 200,
        "neg": -5,
    }
