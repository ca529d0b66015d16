"""Who configures a group's webhooks: in the portal, the department head or team lead of the group
itself (and IT); in the admin, IT, with a test-message action and a read-only delivery log."""

import pytest
from django.urls import reverse

from apps.accounts import services as accounts
from apps.accounts.models import Membership
from apps.webhooks.models import Webhook, WebhookDelivery
from tests.factories import GroupFactory, UserFactory

pytestmark = pytest.mark.django_db
Role = Membership.Role


@pytest.fixture
def tree():
    org = GroupFactory(kind="organisation", name="Org", slug="org")
    dept = GroupFactory(kind="department", name="Vision", slug="vision", parent=org)
    team = GroupFactory(kind="team", name="Detection", slug="detection", parent=dept)
    other = GroupFactory(kind="team", name="Segmentation", slug="segmentation", parent=dept)
    return dept, team, other


@pytest.fixture
def person(client):
    def login(role=None, group=None):
        user = UserFactory(username=f"{role or 'nobody'}-{group.slug if group else 'x'}")
        if role:
            accounts.add_membership(user=user, group=group, role=role)
        client.force_login(user)
        return client

    return login


def test_the_team_lead_adds_tests_and_removes_a_webhook_of_their_team(
    tree, person, receiver, django_capture_on_commit_callbacks
):
    dept, team, other = tree
    client = person(Role.TEAM_LEAD, team)
    url = reverse("portal:webhooks", args=[team.slug])
    page = client.get(url)
    assert page.status_code == 200 and b"Add a webhook" in page.content
    answer = client.post(
        url,
        {"name": "alerts", "url": receiver.url(), "format": "teams", "kinds": ["preemption", "idle_stop"]},
    )
    assert answer.status_code == 302
    webhook = Webhook.objects.get(group=team)
    assert (webhook.name, webhook.format, webhook.kinds, webhook.enabled) == (
        "alerts",
        "teams",
        ["preemption", "idle_stop"],
        True,
    )
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(reverse("portal:webhook-test", args=[team.slug, webhook.pk]), follow=True)
    assert b"Test message to alerts sent" in answer.content
    answer = client.get(url)
    (request,) = receiver.requests
    assert request["body"]["type"] == "message"
    assert WebhookDelivery.objects.get().kind == "test"
    assert b"Delivery log" in answer.content and b'data-state="delivered"' in answer.content
    client.post(reverse("portal:webhook-remove", args=[team.slug, webhook.pk]))
    assert not Webhook.objects.exists() and not WebhookDelivery.objects.exists()


def test_the_team_page_links_its_lead_to_the_webhooks(tree, person, settings):
    dept, team, other = tree
    from apps.policies import services as policies

    policies.create_policy(group=team, reservation=0, limit=8)
    client = person(Role.TEAM_LEAD, team)
    page = client.get(reverse("portal:team", args=[team.slug]))
    assert reverse("portal:webhooks", args=[team.slug]).encode() in page.content


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"url": "http://hooks.example.com/x", "format": "slack", "kinds": ["preemption"]}, "url"),
        ({"url": "https://hooks.example.com/x", "format": "fax", "kinds": ["preemption"]}, "format"),
        ({"url": "https://hooks.example.com/x", "format": "slack", "kinds": ["birthday"]}, "kinds"),
        ({"url": "https://hooks.example.com/x", "format": "slack"}, "kinds"),
    ],
)
def test_a_refused_webhook_is_a_400_naming_the_field(tree, person, fields, field):
    dept, team, other = tree
    client = person(Role.TEAM_LEAD, team)
    answer = client.post(reverse("portal:webhooks", args=[team.slug]), fields)
    assert answer.status_code == 400
    assert field in answer.context["form"].errors
    assert not Webhook.objects.exists()


@pytest.mark.parametrize(
    ("role", "where", "allowed"),
    [
        (Role.TEAM_LEAD, "team", True),
        (Role.DEPARTMENT_HEAD, "dept", False),  # a head configures their own department's webhooks
        (Role.TEAM_LEAD, "other", False),
        (Role.MEMBER, "team", False),
        (Role.FINANCE, "org", False),
        (Role.LEADERSHIP, "org", False),
        (Role.IT_ADMIN, "org", True),
    ],
)
def test_only_it_and_the_groups_own_head_or_lead_configure_its_webhooks(tree, person, role, where, allowed):
    dept, team, other = tree
    group = {"team": team, "dept": dept, "other": other, "org": dept.parent}[where]
    client = person(role, group)
    hook = Webhook.objects.create(group=team, url="https://hooks.example.com/t")
    urls = [
        ("get", reverse("portal:webhooks", args=[team.slug]), {}),
        (
            "post",
            reverse("portal:webhooks", args=[team.slug]),
            {"url": "https://h.example.com/", "format": "slack", "kinds": ["preemption"]},
        ),
        ("post", reverse("portal:webhook-remove", args=[team.slug, hook.pk]), {}),
    ]
    for method, url, data in urls:
        status = getattr(client, method)(url, data).status_code
        assert status == ((200 if method == "get" else 302) if allowed else 403), (method, url)
    assert Webhook.objects.filter(pk=hook.pk).exists() is not allowed


def test_a_department_head_configures_their_departments_webhooks(tree, person):
    dept, team, other = tree
    client = person(Role.DEPARTMENT_HEAD, dept)
    assert client.get(reverse("portal:webhooks", args=[dept.slug])).status_code == 200


def test_another_groups_webhook_is_not_found_under_yours(tree, person):
    dept, team, other = tree
    client = person(Role.TEAM_LEAD, team)
    theirs = Webhook.objects.create(group=other, url="https://hooks.example.com/o")
    assert client.post(reverse("portal:webhook-remove", args=[team.slug, theirs.pk])).status_code == 404
    assert client.post(reverse("portal:webhook-test", args=[team.slug, theirs.pk])).status_code == 404
    assert Webhook.objects.filter(pk=theirs.pk).exists()


def test_an_anonymous_visitor_is_sent_to_log_in(tree, client):
    answer = client.get(reverse("portal:webhooks", args=[tree[1].slug]))
    assert answer.status_code == 302 and answer["Location"].startswith("/accounts/login/")


def test_it_sends_a_test_message_from_the_admin_and_reads_the_log(
    tree, person, receiver, django_capture_on_commit_callbacks
):
    dept, team, other = tree
    client = person(Role.IT_ADMIN, dept.parent)
    webhook = Webhook.objects.create(group=team, url=receiver.url(), format="slack")
    with django_capture_on_commit_callbacks(execute=True):
        answer = client.post(
            reverse("admin:webhooks_webhook_changelist"),
            {"action": "send_test_message", "_selected_action": [webhook.pk]},
            follow=True,
        )
    assert answer.status_code == 200 and b"Test message queued to 1 webhook" in answer.content
    assert receiver.requests[0]["body"]["text"].startswith("Klique test message")
    delivery = WebhookDelivery.objects.get()
    log = client.get(reverse("admin:webhooks_webhookdelivery_changelist"), {"state": "delivered"})
    assert log.status_code == 200 and str(webhook).encode() in log.content
    assert client.get(reverse("admin:webhooks_webhookdelivery_change", args=[delivery.pk])).status_code == 200
    assert client.get(reverse("admin:webhooks_webhookdelivery_add")).status_code == 403
    edit = client.post(
        reverse("admin:webhooks_webhookdelivery_change", args=[delivery.pk]), {"state": "failed"}
    )
    assert edit.status_code == 403
    delivery.refresh_from_db()
    assert delivery.state == "delivered"


def test_it_sends_failed_deliveries_again_from_the_admin(
    tree, person, receiver, django_capture_on_commit_callbacks
):
    dept, team, other = tree
    client = person(Role.IT_ADMIN, dept.parent)
    Webhook.objects.create(group=team, url=receiver.url())
    receiver.script = [500] * 5
    from apps.webhooks import services

    with django_capture_on_commit_callbacks(execute=True):
        services.enqueue_for(team, "preemption", "t", "x")
    delivery = WebhookDelivery.objects.get()
    assert delivery.state == "failed"
    with django_capture_on_commit_callbacks(execute=True):
        client.post(
            reverse("admin:webhooks_webhookdelivery_changelist"),
            {"action": "send_again", "_selected_action": [delivery.pk]},
        )
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("delivered", 1)


@pytest.mark.parametrize("role", [Role.FINANCE, Role.TEAM_LEAD])
def test_no_one_but_it_opens_the_webhooks_in_the_admin(tree, person, role):
    dept, team, other = tree
    client = person(role, team)
    for name in ("admin:webhooks_webhook_changelist", "admin:webhooks_webhookdelivery_changelist"):
        assert client.get(reverse(name)).status_code in (302, 403)


def test_it_adds_a_webhook_in_the_admin_ticking_its_events(tree, person):
    dept, team, other = tree
    client = person(Role.IT_ADMIN, dept.parent)
    data = {
        "group": team.pk,
        "name": "ops",
        "url": "https://hooks.slack.com/services/T/B/X",
        "format": "slack",
    }
    answer = client.post(
        reverse("admin:webhooks_webhook_add"),
        data | {"kinds": ["budget_alert"], "enabled": "on", "secret": "k"},
    )
    assert answer.status_code == 302
    webhook = Webhook.objects.get()
    assert (webhook.kinds, webhook.secret, webhook.enabled) == (["budget_alert"], "k", True)
    refused = client.post(reverse("admin:webhooks_webhook_add"), data | {"url": "http://hooks.example.com/x"})
    assert refused.status_code == 200 and "url" in refused.context["adminform"].form.errors
