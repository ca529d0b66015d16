"""IT's console: every changelist and add page opens for an IT admin and is closed to others;
validation errors show on the form; a pool's page warns when reservations exceed its capacity."""

import pytest
from django.contrib import admin
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.policies import services as policies
from apps.pools.models import Pool
from apps.portal import demo
from tests.factories import GroupFactory, PolicyFactory, PoolFactory, ProfileFactory, UserFactory

pytestmark = pytest.mark.django_db

MODELS = [model for model in admin.site._registry if model._meta.app_label in accounts.KLIQUE_APP_LABELS]


@pytest.fixture
def it_admin():
    user = UserFactory(username="it-admin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.IT_ADMIN)
    return user


def admin_urls(model, name):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{name}")


def test_every_klique_model_is_in_the_admin():
    names = {model._meta.model_name for model in MODELS}
    assert {
        "user",
        "group",
        "membership",
        "project",
        "gputype",
        "pool",
        "worker",
        "profile",
        "resourcepolicy",
        "computeresource",
        "task",
        "taskevent",
        "price",
    } <= names


# Records that only their own path creates, so the admin has no add page for them: the audit trails
# and the ledger (written by the engine and the services), tokens shown once to their owner in the
# portal, workers (they enrol with a pool's enrolment token), schedules (their owner makes them,
# as themselves), the pass log and the engine switch's history.
NO_ADD_PAGE = {
    "governance.ChangeRequest",
    "accounts.ApiToken",
    "accounts.Agent",  # created by its owner (portal or API), its token shown once
    "pools.Worker",
    "pools.TaskLog",
    "tasks.TaskEvent",
    "tasks.Schedule",
    "engine.EngineSwitch",
    "engine.DisabledWindow",
    "engine.PassRecord",
    "ledger.UsageInterval",
    "pricing.PriceChange",
    "policies.PolicyChange",
    "cloud.CloudNode",
    "klique_sessions.Session",  # a session row is written only by starting a session
    "cloud.CloudSpendCapChange",
    "pools.MaintenanceChange",  # an audit trail: written only by the maintenance services
    "webhooks.WebhookDelivery",  # the delivery log: written only by sending
    "whatif.WhatIfRun",  # started from the portal, the API or the CLI (a checked Celery job)
    "ledger.MonthClose",  # closed and reopened only on the finance page (apps.ledger.closing)
    "ledger.Adjustment",  # booked only by the month close (apps.ledger.closing)
    "cloud.CloudBill",  # imported on the portal's cloud bill page or the API (apps.cloud.bills)
    "cloud.CloudBillLine",  # the rows of an import
    "cloud.CloudBillBooking",  # an audit trail: written only by booking a bill's difference
}


def test_the_models_without_an_add_page_are_exactly_the_listed_ones():
    assert {m._meta.label for m in MODELS if m._meta.label in NO_ADD_PAGE} == NO_ADD_PAGE


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m._meta.label)
def test_it_admin_opens_every_changelist_and_add_page(client, it_admin, model):
    demo.seed()
    client.force_login(it_admin)
    assert client.get(admin_urls(model, "changelist")).status_code == 200
    expected = 403 if model._meta.label in NO_ADD_PAGE else 200
    assert client.get(admin_urls(model, "add")).status_code == expected


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m._meta.label)
def test_a_non_staff_user_is_sent_to_the_login_page(client, model):
    user = UserFactory(username="member")
    accounts.add_membership(user=user, group=GroupFactory(), role=Membership.Role.MEMBER)
    client.force_login(user)
    for name in ("changelist", "add"):
        response = client.get(admin_urls(model, name))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


def test_losing_the_it_admin_role_closes_the_admin(client, it_admin):
    accounts.remove_membership(it_admin.memberships.get())
    it_admin.refresh_from_db()
    assert not it_admin.is_staff
    client.force_login(it_admin)
    assert client.get(reverse("admin:pools_pool_changelist")).status_code == 302


def _request(user):
    from django.test import RequestFactory

    request = RequestFactory().get("/")
    request.user = user
    return request


def test_a_broken_rule_is_shown_on_the_admin_form(client, it_admin):
    client.force_login(it_admin)
    group = GroupFactory()
    response = client.post(
        admin_urls(type(PolicyFactory.build()), "add"),
        {
            "group": group.pk,
            "reservation": "8",
            "limit": "4",
            "budget_hours": "",
            "budget_period": "",
            "alert_threshold": "80",
            "compute_resources-TOTAL_FORMS": "0",
            "compute_resources-INITIAL_FORMS": "0",
            "extra_budgets-TOTAL_FORMS": "0",
            "extra_budgets-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 200
    assert "Limit (4) must be at least the reservation (8)." in response.content.decode()


def test_a_pool_page_warns_when_the_reservations_behind_it_exceed_its_capacity(client, it_admin):
    client.force_login(it_admin)
    pool = PoolFactory(name="small", capacity=4)
    profile = ProfileFactory()
    policies.link_pool(profile, pool)
    for reservation in (3, 2):
        policies.connect(policy=PolicyFactory(reservation=reservation, limit=8), profile=profile)
    page = client.get(reverse("admin:pools_pool_change", args=[pool.pk])).content.decode()
    assert "exceed its declared capacity (4 GPUs)" in page
    assert "5 of 4 declared GPUs reserved" in page


def test_admin_execution_order_inline_saves_in_order(client, it_admin):
    client.force_login(it_admin)
    pool = PoolFactory(name="p")
    first, second = ProfileFactory(name="first"), ProfileFactory(name="second")
    url = reverse("admin:pools_pool_change", args=[pool.pk])
    data = {
        "name": "p",
        "kind": Pool.Kind.KUBERNETES,
        "gpu_type": pool.gpu_type_id,
        "capacity": "8",
        "region": "",
        "enabled": "on",
        "profile_links-TOTAL_FORMS": "2",
        "profile_links-INITIAL_FORMS": "0",
        "profile_links-0-profile": second.pk,
        "profile_links-0-profile_rank": "1",
        "profile_links-1-profile": first.pk,
        "profile_links-1-profile_rank": "0",
        "workers-TOTAL_FORMS": "0",
        "workers-INITIAL_FORMS": "0",
    }
    response = client.post(url, data)
    assert response.status_code == 302, response.content.decode()[:2000]
    ranked = pool.profile_links.order_by("profile_rank")
    assert [link.profile.name for link in ranked] == ["first", "second"]


def test_finance_works_on_prices_in_the_admin_and_nothing_else(client):
    user = UserFactory(username="fin")
    accounts.add_membership(user=user, group=GroupFactory(kind="organisation"), role=Membership.Role.FINANCE)
    user.refresh_from_db()
    assert user.is_staff
    client.force_login(user)
    assert client.get(reverse("admin:pricing_price_changelist")).status_code == 200
    assert client.get(reverse("admin:pricing_price_add")).status_code == 200
    assert client.get(reverse("admin:pools_pool_changelist")).status_code == 403
    accounts.remove_membership(user.memberships.get())
    user.refresh_from_db()
    assert not user.is_staff and not user.groups.exists()


def test_an_admin_edit_of_a_quota_is_audited(client, it_admin):
    from apps.policies.models import PolicyChange

    client.force_login(it_admin)
    policy = PolicyFactory(reservation=2, limit=8)
    response = client.post(
        reverse("admin:policies_resourcepolicy_change", args=[policy.pk]),
        {
            "group": policy.group_id,
            "reservation": "3",
            "limit": "8",
            "budget_hours": "",
            "budget_period": "",
            "alert_threshold": "80",
            "seen_version": policy.version,
            "compute_resources-TOTAL_FORMS": "0",
            "compute_resources-INITIAL_FORMS": "0",
            "extra_budgets-TOTAL_FORMS": "0",
            "extra_budgets-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    change = PolicyChange.objects.get(policy=policy)
    assert change.via == "admin" and change.actor == it_admin
    assert change.changes == {"reservation": ["2.000", "3.000"]}


def profile_form(profile, pools=(), resources=()):
    """The profile change form: its pool order inline and its queuing priority inline."""
    data = {
        "name": profile.name,
        "gpus": "1",
        "time_weight": "1",
        "description": "",
        "pool_links-TOTAL_FORMS": str(len(pools)),
        "pool_links-INITIAL_FORMS": "0",
        "compute_resources-TOTAL_FORMS": str(len(resources)),
        "compute_resources-INITIAL_FORMS": "0",
    }
    for i, (pool, rank) in enumerate(pools):
        data |= {f"pool_links-{i}-pool": pool.pk, f"pool_links-{i}-pool_rank": str(rank)}
    for i, (name, policy, rank) in enumerate(resources):
        data |= {
            f"compute_resources-{i}-name": name,
            f"compute_resources-{i}-policy": policy.pk,
            f"compute_resources-{i}-queuing_rank": str(rank),
            f"compute_resources-{i}-enabled": "on",
        }
    return data


def test_admin_pool_order_inline_saves_the_profile_pools_in_order(client, it_admin):
    client.force_login(it_admin)
    profile = ProfileFactory(name="a100")
    onprem, cloud, hpc = PoolFactory(name="onprem"), PoolFactory(name="cloud"), PoolFactory(name="hpc")
    url = reverse("admin:policies_profile_change", args=[profile.pk])
    response = client.post(url, profile_form(profile, pools=[(cloud, 2), (onprem, 0), (hpc, 1)]))
    assert response.status_code == 302, response.content.decode()[:2000]
    assert [link.pool.name for link in profile.pool_links.order_by("pool_rank")] == ["onprem", "hpc", "cloud"]
    page = client.get(reverse("admin:policies_profile_changelist")).content.decode()
    assert "onprem → hpc → cloud" in page


def test_admin_queuing_order_inline_saves_the_profile_policies_in_order(client, it_admin):
    client.force_login(it_admin)
    profile = ProfileFactory(name="a100")
    first, second = (
        PolicyFactory(group=GroupFactory(name="First")),
        PolicyFactory(group=GroupFactory(name="Second")),
    )
    url = reverse("admin:policies_profile_change", args=[profile.pk])
    response = client.post(
        url, profile_form(profile, resources=[("second-a100", second, 0), ("first-a100", first, 1)])
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    ranked = profile.compute_resources.order_by("queuing_rank")
    assert [resource.policy.group.name for resource in ranked] == ["Second", "First"]


def test_admin_queuing_inline_refuses_a_profile_larger_than_the_policy_limit(client, it_admin):
    client.force_login(it_admin)
    profile = ProfileFactory(name="8xh100", gpus=8)
    small = PolicyFactory(reservation=1, limit=4)
    data = profile_form(profile, resources=[("small-8xh100", small, 0)]) | {"gpus": "8"}
    response = client.post(reverse("admin:policies_profile_change", args=[profile.pk]), data)
    assert response.status_code == 200
    assert "is larger than the limit of" in response.content.decode()
    assert not profile.compute_resources.exists()


def changelist_rows(client, name) -> dict[str, dict[str, str]]:
    """A changelist's rows as {first column: {column: text}}."""
    import html
    import re

    page = client.get(reverse(f"admin:{name}_changelist")).content.decode()
    body = page.split("<tbody>", 1)[1].split("</tbody>", 1)[0]
    rows = {}
    for row in body.split("<tr")[1:]:
        cells = re.findall(r'<t[dh] class="field-(\w+)[^"]*"[^>]*>(.*?)</t[dh]>', row, re.S)
        text = {column: html.unescape(re.sub(r"<[^>]+>", "", value)).strip() for column, value in cells}
        rows[next(iter(text.values()))] = text
    return rows


def test_the_policy_and_pool_changelists_show_live_use_borrowing_waiting_and_budgets(
    client, it_admin, time_machine
):
    from datetime import UTC, datetime, timedelta
    from decimal import Decimal

    from apps.engine import services as engine
    from apps.tasks import services as tasks

    t0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
    pool = PoolFactory(name="onprem", capacity=8)
    profile = ProfileFactory(gpus=1, time_weight=1)
    policies.link_pool(profile, pool)
    agents = policies.create_policy(
        group=GroupFactory(name="Agents"), reservation=2, limit=5, budget_hours=10, budget_period="day"
    )
    vision = policies.create_policy(group=GroupFactory(name="Vision"), reservation=0, limit=8)
    user = UserFactory()
    for policy, n in ((agents, 6), (vision, 4)):
        resource = policies.connect(policy=policy, profile=profile)
        for i in range(n):
            tasks.submit(user=user, compute_resource=resource, command=f"run {i}")
        engine.run_pass(now=t0)  # Agents: 5 at its limit, 1 waits; Vision: 3 in the room left
    time_machine.move_to(t0 + timedelta(hours=1), tick=False)
    client.force_login(it_admin)
    rows = changelist_rows(client, "policies_resourcepolicy")
    # 5 GPUs of weight 1 for an hour: 5 of 10 budget hours, burning 5 an hour: out at 10:00
    assert live(rows["Agents"]) == {
        "in_use": 5,
        "borrowed": 3,
        "waiting": 1,
        "budget_used": 5,
        "budget_left": 5,
        "projected_run_out": "projected to run out at 2026-05-04 10:00 UTC",
    }
    assert live(rows["Vision"]) == {
        "in_use": 3,
        "borrowed": 3,
        "waiting": 1,
        "budget_used": "-",
        "budget_left": "-",
        "projected_run_out": "-",
    }
    time_machine.move_to(t0 + timedelta(hours=2), tick=False)
    engine.run_pass(now=t0 + timedelta(hours=2))  # used up: its work is stopped
    rows = changelist_rows(client, "policies_resourcepolicy")
    assert live(rows["Agents"]) == {
        "in_use": 0,
        "borrowed": 0,
        "waiting": 6,  # its five stopped tasks requeued (no worker had claimed them), and the sixth
        "budget_used": 10,
        "budget_left": "used up",
        "projected_run_out": "used up; resets 2026-05-05 00:00 UTC",
    }
    assert live(rows["Vision"])["in_use"] == 4  # the same pass lent it the room Agents left
    used, declared = changelist_rows(client, "pools_pool")["onprem"]["in_use"].split(" / ")
    assert (Decimal(used), Decimal(declared)) == (4, 8)


LIVE = ("in_use", "borrowed", "waiting", "budget_used", "budget_left", "projected_run_out")


def live(row: dict[str, str]) -> dict:
    """The live columns of a policy row, numbers as Decimals (the backends format sums apart)."""
    from decimal import Decimal, InvalidOperation

    def value(text):
        try:
            return Decimal(text)
        except InvalidOperation:
            return text

    return {key: value(row[key]) for key in LIVE}


def test_it_disables_and_enables_the_engine_in_the_admin_and_the_window_is_recorded(
    client, it_admin, time_machine
):
    from datetime import UTC, datetime, timedelta

    from apps.engine import services as engine
    from apps.engine.models import DisabledWindow, EngineSwitch

    t0 = datetime(2026, 5, 4, 8, 0, tzinfo=UTC)
    client.force_login(it_admin)
    url = reverse("admin:engine_engineswitch_changelist")
    assert "engine enabled" in client.get(url).content.decode()
    time_machine.move_to(t0, tick=False)
    response = client.post(url, {"action": "disable_engine", "_selected_action": ["1"]}, follow=True)
    assert "The engine is disabled." in response.content.decode()
    switch = EngineSwitch.objects.get()
    assert (switch.enabled, switch.changed_at, switch.changed_by) == (False, t0, it_admin)
    window = DisabledWindow.objects.get()
    assert (window.start, window.end, window.disabled_by) == (t0, None, it_admin)
    assert engine.run_pass(now=t0 + timedelta(seconds=1)).skip_reason == "disabled"
    time_machine.move_to(t0 + timedelta(minutes=5), tick=False)
    response = client.post(url, {"action": "enable_engine", "_selected_action": ["1"]}, follow=True)
    assert "The engine is enabled." in response.content.decode()
    assert EngineSwitch.objects.get().enabled
    window.refresh_from_db()
    assert (window.start, window.end) == (t0, t0 + timedelta(minutes=5))
    assert not engine.run_pass(now=t0 + timedelta(minutes=5)).skipped
    (window_row,) = changelist_rows(client, "engine_disabledwindow").values()
    assert window_row["end"] not in {"", "-"}  # listed closed, with its end
    pass_log = changelist_rows(client, "engine_passrecord").values()
    assert sorted(row["skip_reason"] for row in pass_log) == ["-", "disabled"]  # "-": it ran
