"""The budget meter warns once per period and kind; /metrics serves the engine's figures."""

import logging
from datetime import UTC, datetime, timedelta
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


@pytest.fixture
def meter(django_capture_on_commit_callbacks):
    """run_meter, with what it leaves for after the commit (the emails) run as the commit would."""

    def run(now):
        with django_capture_on_commit_callbacks(execute=True):
            return services.run_meter(now=now)

    return run


def test_the_meter_warns_the_group_and_the_admins_once_per_period_and_kind(budgeted, meter):
    policy, resource = budgeted
    submit(resource, 2)
    services.run_pass(now=T0)
    assert meter(T0 + timedelta(minutes=10)) == {"threshold": 0, "used_up": 0}
    assert meter(T0 + timedelta(minutes=16)) == {"threshold": 1, "used_up": 0}
    assert meter(T0 + timedelta(minutes=20)) == {"threshold": 0, "used_up": 0}
    assert meter(T0 + timedelta(minutes=31)) == {"threshold": 0, "used_up": 1}
    assert meter(T0 + timedelta(minutes=40)) == {"threshold": 0, "used_up": 0}
    assert BudgetAlert.objects.filter(policy=policy).count() == 2
    warned = set(Notification.objects.values_list("user__username", flat=True))
    assert warned == {"member", "itadmin"}
    assert [sorted(m.to) for m in mail.outbox] == [["it@example.test", "member@example.test"]] * 2
    assert "used up" in mail.outbox[-1].subject


def test_the_next_period_warns_again(budgeted, meter):
    policy, resource = budgeted
    submit(resource, 2)
    services.run_pass(now=T0)
    meter(T0 + timedelta(minutes=31))
    next_day = T0 + timedelta(days=1)
    submit(resource, 2)
    services.run_pass(now=next_day)
    assert meter(next_day + timedelta(minutes=31))["used_up"] == 1
    assert len(mail.outbox) == 4  # the threshold and used up, each day


def test_alert_emails_go_only_once_the_alert_and_its_notifications_are_committed(
    budgeted, django_capture_on_commit_callbacks
):
    policy, resource = budgeted
    submit(resource, 2)
    services.run_pass(now=T0)
    with django_capture_on_commit_callbacks(execute=False) as after_commit:
        assert services.run_meter(now=T0 + timedelta(minutes=16))["threshold"] == 1
    assert BudgetAlert.objects.filter(policy=policy, kind="threshold").exists()
    assert Notification.objects.filter(kind=Notification.Kind.BUDGET_ALERT).count() == 2
    assert mail.outbox == [] and len(after_commit) == 1
    after_commit[0]()
    assert [sorted(m.to) for m in mail.outbox] == [["it@example.test", "member@example.test"]]


def test_a_failed_alert_email_is_logged_and_the_alert_stands(budgeted, meter, monkeypatch, caplog):
    from smtplib import SMTPException

    def refused(*args, **kwargs):
        raise SMTPException("relay refused")

    monkeypatch.setattr(services, "send_mail", refused)
    policy, resource = budgeted
    submit(resource, 2)
    services.run_pass(now=T0)
    with caplog.at_level(logging.ERROR, logger="klique.engine"):
        assert meter(T0 + timedelta(minutes=16))["threshold"] == 1
    (logged,) = [r for r in caplog.records if r.name == "klique.engine"]
    assert "not emailed" in logged.getMessage() and "member@example.test" in logged.getMessage()
    assert logged.exc_info and "relay refused" in str(logged.exc_info[1])
    assert BudgetAlert.objects.filter(policy=policy).count() == 1
    assert Notification.objects.filter(kind=Notification.Kind.BUDGET_ALERT).count() == 2
    assert meter(T0 + timedelta(minutes=17))["threshold"] == 0  # once per period, mail or not


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


@pytest.mark.django_db(transaction=True)
def test_a_crash_while_writing_the_notifications_leaves_no_alert_and_the_next_meter_sends_it(
    budgeted, monkeypatch
):
    policy, resource = budgeted
    submit(resource, 2)
    services.run_pass(now=T0)

    def crash(*args, **kwargs):
        raise RuntimeError("killed between the alert and its notifications")

    with monkeypatch.context() as patch:
        patch.setattr(Notification.objects, "bulk_create", crash)
        with pytest.raises(RuntimeError):
            services.run_meter(now=T0 + timedelta(minutes=16))
    assert not BudgetAlert.objects.exists() and not Notification.objects.exists() and mail.outbox == []
    assert services.run_meter(now=T0 + timedelta(minutes=17))["threshold"] == 1
    assert BudgetAlert.objects.filter(policy=policy).count() == 1
    assert Notification.objects.filter(kind=Notification.Kind.BUDGET_ALERT).count() == 2
    assert len(mail.outbox) == 1  # sent when the meter's transaction committed


def scrape(client, settings) -> dict[tuple, float]:
    """/metrics as {(sample name, sorted labels): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    settings.DEBUG, settings.METRICS_TOKEN = False, "scrape-secret"
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-secret")
    assert response.status_code == 200
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(response.content.decode())
        for sample in family.samples
    }


@pytest.fixture
def lent_and_reclaimed(budgeted, time_machine):
    """Vision borrows the whole pool; Agents (reservation 2, 1 budget hour a day) takes two back;
    one pass is skipped while the engine is disabled. Scraped 6 minutes later."""
    agents, agents_resource = budgeted
    vision = policies.create_policy(group=GroupFactory(name="Vision"), reservation=0, limit=8)
    vision_resource = policies.connect(policy=vision, profile=agents_resource.profile)
    submit(vision_resource, 8)
    services.run_pass(now=T0)
    submit(agents_resource, 3)
    services.run_pass(now=T0 + timedelta(seconds=1))
    at = T0 + timedelta(seconds=1, minutes=6)
    services.set_engine_enabled(False, at=at)
    assert services.run_pass(now=at).skip_reason == "disabled"
    services.set_engine_enabled(True, at=at)
    time_machine.move_to(at, tick=False)
    return agents, agents_resource, vision, vision_resource


def test_metrics_serve_every_engine_figure_with_its_value(client, settings, lent_and_reclaimed):
    from apps.engine.models import PASS_BUCKETS_MS, PassRecord

    agents, agents_resource, vision, vision_resource = lent_and_reclaimed
    metrics = scrape(client, settings)
    ran = list(PassRecord.objects.filter(skipped=False))
    assert len(ran) == 2
    assert metrics[("klique_engine_pass_duration_seconds_count", ())] == 2
    assert metrics[("klique_engine_pass_duration_seconds_sum", ())] == pytest.approx(
        sum(r.duration_ms for r in ran) / 1000
    )
    for bound in PASS_BUCKETS_MS:
        le = (("le", str(bound / 1000)),)
        assert metrics[("klique_engine_pass_duration_seconds_bucket", le)] == sum(
            1 for r in ran if r.duration_ms <= bound
        )
    assert metrics[("klique_engine_pass_duration_seconds_bucket", (("le", "+Inf"),))] == 2
    assert metrics[("klique_engine_passes_skipped_total", (("reason", "disabled"),))] == 1
    assert metrics[("klique_engine_passes_skipped_total", (("reason", "another pass running"),))] == 0
    waiting = "klique_tasks_waiting"
    assert metrics[(waiting, (("compute_resource", agents_resource.name),))] == 1  # at its reservation
    assert metrics[(waiting, (("compute_resource", vision_resource.name),))] == 2  # requeued
    in_use = "klique_policy_gpus_in_use"
    assert metrics[(in_use, (("policy", agents.group.slug),))] == 2
    assert metrics[(in_use, (("policy", vision.group.slug),))] == 6
    assert metrics[("klique_pool_gpus_in_use", (("pool", "onprem"),))] == 8
    assert metrics[("klique_preemptions_total", (("reason", "reclaim"),))] == 2
    # two GPUs of weight 1 for 6 minutes: 0.2 of its 1 budget hour; Vision has no budget
    assert metrics[("klique_budget_hours_used", (("policy", agents.group.slug),))] == pytest.approx(0.2)
    assert metrics[("klique_budget_hours_left", (("policy", agents.group.slug),))] == pytest.approx(0.8)
    assert ("klique_budget_hours_used", (("policy", vision.group.slug),)) not in metrics


def test_pruning_the_pass_log_does_not_lower_the_pass_counters(client, settings, lent_and_reclaimed):
    from apps.engine.models import PassRecord

    before = scrape(client, settings)
    assert services.prune_pass_log(datetime(2100, 1, 1, tzinfo=UTC)) == 3  # passes start at wall time
    assert not PassRecord.objects.exists()
    after = scrape(client, settings)
    counters = {
        key: value
        for key, value in before.items()
        if key[0].startswith(("klique_engine_pass_duration_seconds", "klique_engine_passes_skipped"))
    }
    assert len(counters) == 10 + 1 + 2 + 2  # buckets and +Inf, count and sum, two skip reasons
    assert {key: after[key] for key in counters} == counters
    services.run_pass(now=T0 + timedelta(minutes=7))
    assert scrape(client, settings)[("klique_engine_pass_duration_seconds_count", ())] == 3
