"""A group verdict (one compute resource, one size) is the verdict of each of its waiting tasks:
the live engine stores verdicts per group and relies on it."""

from hypothesis import HealthCheck, given, settings

from apps.engine.core import allocate
from tests.engine.test_properties import estates


def shape(v):
    return v.rule, v.pools, v.policy, v.budget_left, v.budget_needed, v.reset_at


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(estates())
def test_the_group_verdict_is_the_verdict_of_every_waiting_task_in_the_group(s):
    decisions = allocate(s)
    for verdict in decisions.verdicts():
        size = next(t.size for t in s.waiting[verdict.resource] if t.id == verdict.task)
        group = decisions.group_verdict(verdict.resource, size)
        assert shape(group) == shape(verdict)
    assert decisions.group_verdict("no such resource", 1000) is None
