"""The starvation guard on the database: a queue head that has waited its profile's starvation_s
holds a pool, its stored verdict is its own ("starving", with the GPUs it needs and those free),
work behind it is told the pool is held ("starvation_hold"), and the holder's verdict is written
once, not again at every pass while nothing changes (docs/engine.md, "The starvation guard")."""

from datetime import timedelta

import pytest
from django.utils import timezone

from apps.engine import services
from apps.policies import services as policies
from apps.tasks import services as tasks
from apps.tasks.models import Task, TaskEvent
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db


def test_a_starving_head_holds_its_pool_and_its_verdict_is_written_once():
    profile = ProfileFactory(name="any", gpus=1, size_from_task=True, starvation_s=0)
    policies.link_pool(profile, PoolFactory(name="onprem", capacity=8))
    team = policies.create_policy(group=GroupFactory(name="Team", slug="team"), reservation=0, limit=16)
    resource = policies.connect(policy=team, profile=profile)
    user = UserFactory()
    running = [tasks.submit(user=user, compute_resource=resource, command="x", gpus=1) for _ in range(6)]
    services.run_pass(now=timezone.now())
    assert Task.objects.filter(pk__in=[t.pk for t in running], state=Task.State.PLACED).count() == 6

    big = tasks.submit(user=user, compute_resource=resource, command="x", gpus=4)
    small = tasks.submit(user=user, compute_resource=resource, command="x", gpus=1)
    services.run_pass(now=timezone.now() + timedelta(seconds=1))
    big.refresh_from_db()
    small.refresh_from_db()
    assert (big.state, small.state) == (Task.State.QUEUED, Task.State.QUEUED)
    assert (big.verdict["rule"], big.verdict["pools"]) == ("starving", ["onprem"])
    assert "4 GPUs are free on onprem (2 free now)" in big.verdict["message"]
    assert (small.verdict["rule"], small.verdict["pools"]) == ("starvation_hold", ["onprem"])

    events = TaskEvent.objects.filter(task=big, kind=TaskEvent.Kind.VERDICT)
    assert events.count() == 1
    services.run_pass(now=timezone.now() + timedelta(seconds=2))
    assert events.count() == 1
    big.refresh_from_db()
    assert big.verdict["rule"] == "starving"
