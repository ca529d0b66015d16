"""The story `make run` tells a newcomer (apps/portal/demo_load.py), replayed on a virtual clock
against the demo estate and the real engine pass: within minutes Perception borrows idle GPUs,
Generation takes them back by reclaim, and the Agents team's daily budget runs out."""

from datetime import UTC, datetime, timedelta

import pytest
import time_machine

from apps.engine import services as engine
from apps.portal import demo
from apps.portal.demo_load import DemoLoad
from apps.tasks.models import Task, TaskEvent

pytestmark = pytest.mark.django_db

START = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def borrowed_by(group_slug: str, now: datetime) -> bool:
    """Some of the group's placed work is above its reservation (it borrows)."""
    from apps.ledger.budgets import budget_status
    from apps.policies.models import ResourcePolicy

    policy = ResourcePolicy.objects.get(group__slug=group_slug)
    return budget_status([policy], now=now)[policy.pk].gpus_in_use > policy.reservation


def test_the_demo_shows_lending_reclaim_and_a_budget_running_out_within_minutes(settings):
    settings.LOW_WATERMARK_S = 120  # as `make run` sets it
    demo.seed()
    load = DemoLoad()
    lent_at = reclaimed_at = used_up_at = None
    with time_machine.travel(START, tick=False) as clock:
        for second in range(0, 15 * 60, 10):
            now = START + timedelta(seconds=second)
            clock.move_to(now)
            load.tick(second)
            engine.run_pass(now=now)
            engine.run_meter(now=now)
            if lent_at is None and borrowed_by("perception", now):
                lent_at = second
            preempted = TaskEvent.objects.filter(kind=TaskEvent.Kind.PREEMPTED)
            if (
                reclaimed_at is None
                and preempted.filter(
                    reason=Task.StopReason.RECLAIM, task__compute_resource__policy__group__slug="perception"
                ).exists()
            ):
                reclaimed_at = second
            if (
                used_up_at is None
                and preempted.filter(
                    reason=Task.StopReason.BUDGET, task__compute_resource__policy__group__slug="agents"
                ).exists()
            ):
                used_up_at = second
            if None not in (lent_at, reclaimed_at, used_up_at):
                break
    print(f"lent at {lent_at} s, reclaimed at {reclaimed_at} s, budget used up at {used_up_at} s")
    assert lent_at is not None and lent_at < 60, "Perception borrows idle A100s at once"
    assert reclaimed_at is not None and 90 <= reclaimed_at < 180, "Generation reclaims when its wave comes"
    assert used_up_at is not None and used_up_at < 15 * 60, "the Agents' daily budget runs out in minutes"
