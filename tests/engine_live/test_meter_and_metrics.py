"""The budget meter warns once per period and kind; /metrics serves the engine's figures."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.core import mail

from apps.accounts import services as accounts
from apps.accounts.models import Membership, Notification
from apps.engine import services
from apps.ledger.models import BudgetAlert
from apps.policies import services as policies
from tests.engine_live.test_pass import T0, submit
from tests.factories import GroupFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def budgeted():
    pool = PoolFactory(name="onprem", capacity=8)
    profile = ProfileFactory(gpus=1, time_weight=Decimal("1"))
    policies.link_pool(profile, pool)
    group = GroupFactory(name="Agents")
    policy = policies.create_policy(
        group=group, reservation=2, limit=4, budget_hours=1, budget_period="day", alert_threshold=50
    )
    member = UserFactory(username="member", email="member@example.test")
    accounts.add_membership(user=member, group=group, role=Membership.Role.MEMBER)
    admin = UserFactory(username="itadmin", email="it@example.test")
    accounts.add_membership(
        user=admin, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN
    )
    UserFactory(username="bystander", email="other@example.test")
    return policy, policies.connect(policy=policy, profile=profile)


def test_the_meter_warns_the_group_and_the_admins_once_per_period_and_kind(budgeted):
    policy, resource = budgeted
    submit(resource, 2)
    services.run_pass(now=T0)
    assert services.run_meter(now=T0 + timedelta(minutes=10)) == {"threshold": 0, "used_up": 0}
    assert services.run_meter(now=T0 + timedelta(minutes=16)) == {"threshold": 1, "used_up": 0}
    assert services.run_meter(now=T0 + timedelta(minutes=20)) == {"threshold": 0, "used_up": 0}
    assert services.run_meter(now=T0 + timedelta(minutes=31)) == {"threshold": 0, "used_up": 1}
    assert services.run_meter(now=T0 + timedelta(minutes=40)) == {"threshold": 0, "used_up": 0}
    assert BudgetAlert.objects.filter(policy=policy).count() == 2
    warned = set(Notification.objects.values_list("user__username", flat=True))
    assert warned == {"member", "itadmin"}
    assert [sorted(m.to) for m in mail.outbox] == [["it@example.test", "member@example.test"]] * 2
    assert "used up" in mail.outbox[-1].subject


def test_the_next_period_warns_again(budgeted):
    policy, resource = budgeted
    submit(resource, 2)
    services.run_pass(now=T0)
    services.run_meter(now=T0 + timedelta(minutes=31))
    next_day = T0 + timedelta(days=1)
    submit(resource, 2)
    services.run_pass(now=next_day)
    assert services.run_meter(now=next_day + timedelta(minutes=31))["used_up"] == 1


def test_metrics_expose_the_pass_log_queues_use_preemptions_and_budgets(client, budgeted, settings):
    policy, resource = budgeted
    submit(resource, 6)
    services.run_pass(now=T0)
    services.run_pass(now=T0 + timedelta(minutes=31))
    settings.DEBUG, settings.METRICS_TOKEN = False, ""
    assert client.get("/metrics").status_code == 403  # production without a scrape token
    settings.METRICS_TOKEN = "scrape-secret"
    body = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret").content.decode()
    for name in (
        "klique_engine_pass_duration_seconds_count 2.0",
        "klique_engine_passes_skipped_total",
        'klique_tasks_waiting{compute_resource="',
        'klique_preemptions_total{reason="budget"} 4.0',
        'klique_budget_hours_used{policy="',
    ):
        assert name in body, name
    assert client.get("/metrics").status_code == 403
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer naïve").status_code == 403
