"""The wired events: the budget meter's alerts, a live pass's preemptions (one message per group
per pass, summarising its tasks) and idle stops each produce deliveries, sent after commit."""

from datetime import timedelta
from decimal import Decimal

import pytest

from apps.accounts.models import Group
from apps.engine import services as engine
from apps.policies import services as policies
from apps.webhooks.models import Webhook, WebhookDelivery
from tests.engine_live.test_pass import T0, estate, submit
from tests.factories import GroupFactory, PoolFactory, ProfileFactory

pytestmark = pytest.mark.django_db


def hook(receiver, group, **fields) -> Webhook:
    return Webhook.objects.create(group=group, url=receiver.url(f"/{group.slug}"), format="generic", **fields)


def test_a_budget_alert_goes_to_the_groups_webhook(receiver, django_capture_on_commit_callbacks):
    pool = PoolFactory(name="onprem", capacity=8)
    profile = ProfileFactory(gpus=1, time_weight=Decimal("1"))
    policies.link_pool(profile, pool)
    group = GroupFactory(name="Agents", slug="agents")
    policy = policies.create_policy(
        group=group, reservation=2, limit=4, budget_hours=1, budget_period="day", alert_threshold=50
    )
    resource = policies.connect(policy=policy, profile=profile)
    hook(receiver, group)
    submit(resource, 2)
    engine.run_pass(now=T0)
    with django_capture_on_commit_callbacks(execute=True):
        assert engine.run_meter(now=T0 + timedelta(minutes=16))["threshold"] == 1
    (request,) = receiver.requests
    assert request["body"]["kind"] == "budget_alert" and request["body"]["group"] == "Agents"
    assert "time budget of Agents at" in request["body"]["title"]
    assert "alert threshold 50%" in request["body"]["text"]
    with django_capture_on_commit_callbacks(execute=True):
        assert engine.run_meter(now=T0 + timedelta(minutes=31))["used_up"] == 1
    assert "used up" in receiver.requests[-1]["body"]["title"]
    assert WebhookDelivery.objects.filter(state="delivered").count() == 2


def test_a_pass_sends_one_preemption_message_per_group_summarising_its_tasks(
    receiver, django_capture_on_commit_callbacks
):
    pool, ra, rb = estate()
    a, b = ra.policy.group, rb.policy.group
    for group in (a, b, Group.objects.get(name="Org")):
        hook(receiver, group)
    borrowed = submit(rb, 8)
    with django_capture_on_commit_callbacks(execute=True):
        engine.run_pass(now=T0)
    assert receiver.requests == []
    submit(ra, 4)
    with django_capture_on_commit_callbacks(execute=True):
        assert engine.run_pass(now=T0 + timedelta(seconds=1)).preempted == 4
    assert sorted(r["path"] for r in receiver.requests) == ["/b", f"/{a.parent.slug}"]
    body = receiver.requests[0]["body"]
    assert body["kind"] == "preemption" and body["group"] == "B"
    assert body["title"] == "4 tasks of B preempted"
    assert body["text"].count("• Task ") == 4 and "reclaimed for another group's reservation" in body["text"]
    for task in borrowed[-4:]:
        assert f"Task {task}" in body["text"]
    assert body["link"] == ""


def test_a_pass_without_preemptions_sends_nothing(receiver, django_capture_on_commit_callbacks):
    pool, ra, rb = estate()
    hook(receiver, rb.policy.group)
    submit(rb, 4)
    with django_capture_on_commit_callbacks(execute=True):
        engine.run_pass(now=T0)
    assert receiver.requests == [] and not WebhookDelivery.objects.exists()
