"""Anti-thrash guarantees through the live engine on the database (issue 16): a profile's minimum
runtime keeps a freshly placed task from being a reclaim victim, and a policy's cap on reclaims
per hour (counted from its own tasks' reclaim events in the sliding hour) keeps the rest of its
work from being one. A reclaim held back leaves the waiting task the verdict ``reclaim_held``,
with what protects the victims and until when, shown on its portal page and in the API."""

from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from apps.engine import loader, services
from apps.policies import services as policies
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.channels.conftest import client_for
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)


def estate(*, min_runtime_s=0, cap_b=None, capacity=4):
    """One pool; group A reserves all of it, group B reserves none and borrows."""
    pool = PoolFactory(name="onprem", capacity=capacity)
    profile = ProfileFactory(name="gpu-1", gpus=1, min_runtime_s=min_runtime_s)
    policies.link_pool(profile, pool)
    org = GroupFactory(kind="organisation", name="Org")
    a = policies.create_policy(
        group=GroupFactory(parent=org, name="A", slug="a"), reservation=capacity, limit=capacity
    )
    b = policies.create_policy(group=GroupFactory(parent=org, name="B", slug="b"), reservation=0, limit=8)
    if cap_b is not None:
        policies.update_policy(b, max_preemptions_per_hour=cap_b)
    return policies.connect(policy=a, profile=profile), policies.connect(policy=b, profile=profile)


def submit(resource, n, user=None):
    user = user or UserFactory()
    return [tasks.submit(user=user, compute_resource=resource, command=f"run {i}") for i in range(n)]


def reclaimed(items):
    """The tasks of ``items`` reclaim has preempted, by their events."""
    return set(
        TaskEvent.objects.filter(
            task__in=items, kind=TaskEvent.Kind.PREEMPTED, reason=Task.StopReason.RECLAIM
        ).values_list("task_id", flat=True)
    )


def test_minimum_runtime_holds_reclaim_until_the_victims_have_run_that_long(client):
    """Rule: no task is preempted for reclaim before its profile's minimum runtime."""
    ra, rb = estate(min_runtime_s=600)
    borrowed = submit(rb, 4)
    services.run_pass(now=T0)
    placed_at = Task.objects.get(pk=borrowed[-1].pk).placed_at
    assert placed_at == T0
    (mine,) = submit(ra, 1)
    record = services.run_pass(now=T0 + timedelta(seconds=10))
    assert record.preempted == 0 and not reclaimed(borrowed)
    waiting = Task.objects.get(pk=mine.pk)
    assert waiting.state == Task.State.QUEUED
    assert waiting.verdict["rule"] == "reclaim_held" and waiting.verdict["cause"] == "min_runtime"
    assert datetime.fromisoformat(waiting.verdict["reset_at"]) == placed_at + timedelta(seconds=600)
    message = waiting.verdict["message"]
    assert message == (
        "Reclaim waits: the work it would take back in onprem is protected by minimum runtime until "
        "08:10 UTC."
    )
    # the user sees why on the task's page and in the API
    client.force_login(mine.user)
    assert message in client.get(reverse("portal:task", args=[mine.pk])).content.decode()
    shown = client_for(mine.user).get(f"/api/v1/tasks/{mine.pk}/").json()["verdict"]
    assert (shown["rule"], shown["cause"], shown["message"]) == ("reclaim_held", "min_runtime", message)

    services.run_pass(now=T0 + timedelta(seconds=599))
    assert not reclaimed(borrowed)
    record = services.run_pass(now=T0 + timedelta(seconds=600))
    assert record.preempted == 1 and reclaimed(borrowed) == {borrowed[-1].pk}
    assert Task.objects.get(pk=mine.pk).state == Task.State.PLACED
    assert Task.objects.get(pk=borrowed[-1].pk).last_preemption_reason == "reclaim"


def test_a_victim_placed_earlier_is_taken_while_a_fresh_one_is_protected():
    """Reclaim takes other victims when the newest placed work is still within its minimum runtime."""
    ra, rb = estate(min_runtime_s=600)
    (old,) = submit(rb, 1)
    services.run_pass(now=T0)
    fresh = submit(rb, 3)
    services.run_pass(now=T0 + timedelta(seconds=900))
    (mine,) = submit(ra, 1)
    record = services.run_pass(now=T0 + timedelta(seconds=910))
    assert record.preempted == 1 and reclaimed([old, *fresh]) == {old.pk}
    assert Task.objects.get(pk=mine.pk).state == Task.State.PLACED


def test_the_cap_on_reclaims_per_hour_holds_reclaim_until_the_oldest_leaves_the_hour():
    """Rule: no policy loses more than its cap to reclaim in any sliding hour; counted from the
    reclaim events of its own tasks."""
    ra, rb = estate(cap_b=1)
    borrowed = submit(rb, 4)
    services.run_pass(now=T0 - timedelta(minutes=40))
    first = submit(ra, 1)
    record = services.run_pass(now=T0 - timedelta(minutes=30))
    assert record.preempted == 1
    (event,) = TaskEvent.objects.filter(kind=TaskEvent.Kind.PREEMPTED, reason=Task.StopReason.RECLAIM)
    assert event.at == T0 - timedelta(minutes=30) and event.task_id == borrowed[-1].pk

    (second,) = submit(ra, 1)
    record = services.run_pass(now=T0)  # the reclaim 30 min ago used B's one reclaim this hour
    assert record.preempted == 0 and reclaimed(borrowed) == {borrowed[-1].pk}
    waiting = Task.objects.get(pk=second.pk)
    assert waiting.verdict["rule"] == "reclaim_held" and waiting.verdict["cause"] == "max_preemptions"
    assert datetime.fromisoformat(waiting.verdict["reset_at"]) == event.at + timedelta(seconds=3600)
    assert "their group's cap on preemptions per hour until 08:30 UTC" in waiting.verdict["message"]

    services.run_pass(now=event.at + timedelta(seconds=3600))  # the event is exactly an hour old
    assert Task.objects.get(pk=second.pk).state == Task.State.PLACED
    assert len(reclaimed(borrowed)) == 2
    assert Task.objects.get(pk=first[0].pk).state == Task.State.PLACED


def test_the_cap_counts_a_reclaim_61_minutes_ago_no_more():
    ra, rb = estate(cap_b=1)
    borrowed = submit(rb, 4)
    services.run_pass(now=T0 - timedelta(minutes=70))
    submit(ra, 1)
    assert services.run_pass(now=T0 - timedelta(minutes=61)).preempted == 1
    (mine,) = submit(ra, 1)
    record = services.run_pass(now=T0)
    assert record.preempted == 1 and len(reclaimed(borrowed)) == 2
    assert Task.objects.get(pk=mine.pk).state == Task.State.PLACED


def test_past_its_cap_a_policy_is_no_victim_but_others_still_are():
    ra, rb = estate(cap_b=0, capacity=4)
    c = policies.create_policy(group=GroupFactory(name="C", slug="c"), reservation=0, limit=8)
    rc = policies.connect(policy=c, profile=ra.profile)
    from_b = submit(rb, 2)
    from_c = submit(rc, 2)
    services.run_pass(now=T0)
    (mine,) = submit(ra, 1)
    record = services.run_pass(now=T0 + timedelta(seconds=1))
    assert record.preempted == 1 and not reclaimed(from_b) and len(reclaimed(from_c)) == 1
    assert Task.objects.get(pk=mine.pk).state == Task.State.PLACED


def test_the_loader_reads_the_reclaims_of_capped_policies_in_one_query():
    """Only reclaim preemptions of the policy's own tasks, inside the sliding hour (at > now - 3600 s),
    oldest first; one query for them, and none when no policy has a cap."""
    ra, rb = estate()
    (task_a,) = submit(ra, 1)
    (task_b,) = submit(rb, 1)
    uncapped = _load_queries()
    policies.update_policy(rb.policy, max_preemptions_per_hour=2)
    for task, kind, reason, ago in [
        (task_b, TaskEvent.Kind.PREEMPTED, "reclaim", timedelta(minutes=30)),
        (task_b, TaskEvent.Kind.PREEMPTED, "reclaim", timedelta(minutes=59, seconds=59)),
        (task_b, TaskEvent.Kind.PREEMPTED, "reclaim", timedelta(hours=1)),  # left the hour
        (task_b, TaskEvent.Kind.PREEMPTED, "reclaim", -timedelta(seconds=1)),  # after now
        (task_b, TaskEvent.Kind.PREEMPTED, "budget", timedelta(minutes=5)),
        (task_b, TaskEvent.Kind.VERDICT, "reclaim_held", timedelta(minutes=5)),
        (task_a, TaskEvent.Kind.PREEMPTED, "reclaim", timedelta(minutes=5)),  # A has no cap
    ]:
        TaskEvent.objects.create(task=task, kind=kind, reason=reason, at=T0 - ago)
    assert _load_queries() == uncapped + 1
    snapshot = loader.load(T0).snapshot
    by_id = {p.id: p for p in snapshot.policies}
    b = by_id[str(rb.policy_id)]
    assert b.max_preemptions_per_hour == 2
    assert b.reclaims == (T0 - timedelta(minutes=59, seconds=59), T0 - timedelta(minutes=30))
    a = by_id[str(ra.policy_id)]
    assert a.max_preemptions_per_hour is None and a.reclaims == ()
    assert {f.min_runtime_s for f in snapshot.profiles} == {0}


def _load_queries() -> int:
    with CaptureQueriesContext(connection) as captured:
        loader.load(T0)
    return len(captured.captured_queries)
