"""Webhook deliveries: written in the caller's transaction and sent only after it commits, to the
webhooks of the group and its ancestors that subscribe to the kind; retried with Celery's
exponential backoff and logged at each attempt; failed after the last attempt. Against a real HTTP
server on 127.0.0.1."""

import hashlib
import hmac

import pytest
from django.core.exceptions import ValidationError
from django.db import transaction

from apps.webhooks import services
from apps.webhooks.models import Webhook, WebhookDelivery
from tests.factories import GroupFactory


@pytest.fixture
def tree(db):
    org = GroupFactory(kind="organisation", name="Org")
    dept = GroupFactory(kind="department", name="Vision", parent=org)
    team = GroupFactory(kind="team", name="Detection", parent=dept)
    sibling = GroupFactory(kind="team", name="Segmentation", parent=dept)
    return org, dept, team, sibling


def hook(receiver, group, path="/hook", **fields) -> Webhook:
    webhook = Webhook(group=group, url=receiver.url(path), **fields)
    webhook.full_clean()
    webhook.save()
    return webhook


@pytest.mark.django_db(transaction=True)
def test_a_delivery_is_sent_only_after_the_transaction_commits(receiver, tree):
    team = tree[2]
    hook(receiver, team, format="generic")
    with transaction.atomic():
        services.enqueue_for(
            team, "budget_alert", "Budget at 80%", "Detection used 8 of 10 hours.", "/teams/x/"
        )
        assert receiver.requests == []
        assert WebhookDelivery.objects.get().state == "pending"
    (request,) = receiver.requests
    assert request["body"]["title"] == "Budget at 80%" and request["body"]["group"] == "Detection"
    assert request["body"]["link"] == "http://127.0.0.1:8000/teams/x/"
    assert request["headers"]["X-Klique-Event"] == "budget_alert"
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("delivered", 1, 200)
    assert delivery.delivered_at is not None and delivery.last_error == ""


@pytest.mark.django_db(transaction=True)
def test_nothing_is_written_or_sent_for_a_rolled_back_transaction(receiver, tree):
    team = tree[2]
    hook(receiver, team)
    with pytest.raises(RuntimeError), transaction.atomic():
        services.enqueue_for(team, "preemption", "Preempted", "Two tasks were preempted.")
        raise RuntimeError("the caller's work failed")
    assert receiver.requests == [] and not WebhookDelivery.objects.exists()


@pytest.fixture
def send(django_capture_on_commit_callbacks):
    """enqueue_for, with its after-commit sending run as the commit would."""

    def run(group, kind="budget_alert", title="Title", text="Text", link=""):
        with django_capture_on_commit_callbacks(execute=True):
            services.enqueue_for(group, kind, title, text, link)

    return run


def test_a_500_is_retried_until_the_receiver_accepts_and_each_attempt_is_logged(receiver, tree, send):
    team = tree[2]
    hook(receiver, team)
    receiver.script = [500, 503]
    send(team)
    assert len(receiver.requests) == 3
    assert receiver.requests[0]["raw"] == receiver.requests[2]["raw"]  # the same body each attempt
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("delivered", 3, 200)
    assert delivery.last_error == ""


def test_a_delivery_fails_after_the_last_attempt(receiver, tree, send, settings):
    team = tree[2]
    hook(receiver, team)
    receiver.script = [500] * 10
    send(team)
    attempts = settings.WEBHOOK_MAX_ATTEMPTS
    assert len(receiver.requests) == attempts == 5
    delivery = WebhookDelivery.objects.get()
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("failed", attempts, 500)
    assert delivery.last_error == "HTTP 500" and delivery.delivered_at is None  # never the body


def test_an_unreachable_receiver_fails_with_the_connection_error_logged(receiver, tree, send):
    team = tree[2]
    webhook = hook(receiver, team)
    receiver.close()
    send(team)
    delivery = WebhookDelivery.objects.get(webhook=webhook)
    assert (delivery.state, delivery.attempts, delivery.last_status_code) == ("failed", 5, None)
    assert "ConnectError" in delivery.last_error


def test_a_failed_delivery_can_be_sent_again(receiver, tree, send, django_capture_on_commit_callbacks):
    team = tree[2]
    hook(receiver, team)
    receiver.script = [500] * 5
    send(team)
    delivery = WebhookDelivery.objects.get()
    assert delivery.state == "failed"
    with django_capture_on_commit_callbacks(execute=True):
        assert services.resend([delivery]) == 1
    delivery.refresh_from_db()
    assert (delivery.state, delivery.attempts) == ("delivered", 1)


def test_the_webhooks_of_the_group_and_its_ancestors_get_its_events_and_no_others(receiver, tree, send):
    org, dept, team, sibling = tree
    for group in tree:
        hook(receiver, group, path=f"/{group.name}")
    send(team, title="team event")
    assert sorted(r["path"] for r in receiver.requests) == ["/Detection", "/Org", "/Vision"]
    receiver.requests.clear()
    send(dept, title="department event")
    assert sorted(r["path"] for r in receiver.requests) == ["/Org", "/Vision"]


def test_only_enabled_webhooks_subscribed_to_the_kind_get_it(receiver, tree, send):
    team = tree[2]
    hook(receiver, team, path="/preemptions", kinds=["preemption"])
    hook(receiver, team, path="/all")
    hook(receiver, team, path="/off", enabled=False)
    send(team, kind="budget_alert")
    assert [r["path"] for r in receiver.requests] == ["/all"]
    receiver.requests.clear()
    send(team, kind="preemption")
    assert sorted(r["path"] for r in receiver.requests) == ["/all", "/preemptions"]
    assert set(WebhookDelivery.objects.values_list("kind", flat=True)) == {"budget_alert", "preemption"}


def test_with_a_secret_each_request_is_signed_with_hmac_sha256_of_its_body(receiver, tree, send):
    team = tree[2]
    hook(receiver, team, format="generic", secret="s3cret")
    send(team)
    (request,) = receiver.requests
    expected = hmac.new(b"s3cret", request["raw"], hashlib.sha256).hexdigest()
    assert request["headers"]["X-Klique-Signature"] == f"sha256={expected}"


def test_a_webhook_without_a_secret_sends_no_signature(receiver, tree, send):
    hook(receiver, tree[2])
    send(tree[2])
    assert "X-Klique-Signature" not in receiver.requests[0]["headers"]


def test_an_unknown_kind_is_refused(tree):
    with pytest.raises(ValueError, match="kind must be one of"):
        services.enqueue_for(tree[2], "birthday", "t", "x")


@pytest.mark.parametrize(
    ("url", "ok"),
    [
        ("https://hooks.slack.com/services/T/B/X", True),
        ("http://127.0.0.1:9000/hook", True),
        ("http://localhost/hook", True),
        ("http://hooks.example.com/hook", False),
        ("ftp://127.0.0.1/hook", False),
    ],
)
def test_a_webhook_url_must_use_https_except_to_the_development_hosts(tree, url, ok):
    webhook = Webhook(group=tree[2], url=url)
    if ok:
        webhook.full_clean()
    else:
        with pytest.raises(ValidationError) as refused:
            webhook.full_clean()
        assert "url" in refused.value.message_dict


def test_plain_http_is_refused_everywhere_when_no_development_host_is_set(tree, settings):
    settings.WEBHOOK_HTTP_HOSTS = []
    with pytest.raises(ValidationError, match="https"):
        Webhook(group=tree[2], url="http://127.0.0.1:9000/hook").full_clean()


@pytest.mark.parametrize("kinds", [["budget_alert", "birthday"], "preemption", ["idle_stop", "idle_stop"]])
def test_the_kinds_must_be_a_list_of_known_kinds_each_once(tree, kinds):
    with pytest.raises(ValidationError) as refused:
        Webhook(group=tree[2], url="https://example.com/h", kinds=kinds).full_clean()
    assert "kinds" in refused.value.message_dict


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/",  # a cloud's metadata service
        "https://10.0.0.1:6443/api",
        "https://192.168.1.5/hook",
        "https://[::1]/hook",
    ],
)
def test_an_internal_address_is_refused_so_a_webhook_cannot_call_inside_the_network(tree, url):
    with pytest.raises(ValidationError, match="internal address") as refused:
        Webhook(group=tree[2], url=url).full_clean()
    assert "url" in refused.value.message_dict


def test_localhost_over_https_is_refused_unless_it_is_a_development_host(tree, settings):
    settings.WEBHOOK_HTTP_HOSTS = []
    with pytest.raises(ValidationError, match="internal address"):
        Webhook(group=tree[2], url="https://localhost/hook").full_clean()
    settings.WEBHOOK_HTTP_HOSTS = ["localhost"]
    Webhook(group=tree[2], url="https://localhost/hook").full_clean()
