"""Queue and send webhook deliveries. Deliveries are written in the caller's transaction and sent
only once it commits (``transaction.on_commit``); the sending is a Celery task with retries."""

import hashlib
import hmac
import ipaddress
import json
import logging

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from apps.webhooks import payloads
from apps.webhooks.models import KINDS, Webhook, WebhookDelivery, send_address

log = logging.getLogger("klique.webhooks")


class DeliveryFailed(Exception):
    """One attempt failed (non-2xx answer, timeout, connection error); Celery retries it."""


def enqueue_for(group, kind: str, title: str, text: str, link: str = "") -> None:
    """Write one delivery for each enabled webhook of ``group`` and of its ancestors that subscribes
    to ``kind``; send them after the current transaction commits (never for a rolled-back one)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, not {kind!r}")
    if group is None:
        return
    chain = [group.pk, *(ancestor.pk for ancestor in group.ancestors())]
    hooks = [
        hook for hook in Webhook.objects.filter(group_id__in=chain, enabled=True) if hook.subscribes(kind)
    ]
    if not hooks:
        return
    at = timezone.now()
    link = absolute(link)
    deliveries = WebhookDelivery.objects.bulk_create(
        WebhookDelivery(
            webhook=hook,
            kind=kind,
            payload=payloads.build(hook.format, kind, title, text, link, str(group), at),
        )
        for hook in hooks
    )
    ids = [delivery.pk for delivery in deliveries]
    transaction.on_commit(lambda: dispatch(ids))


def create_webhook(*, group, **fields) -> Webhook:
    webhook = Webhook(group=group, **fields)
    webhook.full_clean()
    webhook.save()
    return webhook


def remove_webhook(webhook: Webhook) -> None:
    """The webhook and its delivery log."""
    webhook.delete()


def send_test(webhook: Webhook) -> WebhookDelivery:
    """A test message to one webhook (enabled or not, whatever its kinds), sent after commit."""
    at = timezone.now()
    delivery = WebhookDelivery.objects.create(
        webhook=webhook,
        kind="test",
        payload=payloads.build(
            webhook.format,
            "test",
            "Klique test message",
            f"This webhook of {webhook.group} is set up: budget alerts, preemptions, idle stops and "
            "change-request decisions it subscribes to will arrive here.",
            absolute("/"),
            str(webhook.group),
            at,
        ),
    )
    transaction.on_commit(lambda: dispatch([delivery.pk]))
    return delivery


def resend(deliveries) -> int:
    """Send failed deliveries again from a fresh count of attempts."""
    ids = [d.pk for d in deliveries if d.state == WebhookDelivery.State.FAILED]
    WebhookDelivery.objects.filter(pk__in=ids).update(state=WebhookDelivery.State.PENDING, attempts=0)
    transaction.on_commit(lambda: dispatch(ids))
    return len(ids)


def absolute(link: str) -> str:
    """Portal links (``/work/tasks/1/``) made absolute with ``KLIQUE_PUBLIC_URL`` for chat clients."""
    if link.startswith("/"):
        return settings.KLIQUE_PUBLIC_URL.rstrip("/") + link
    return link


def dispatch(ids: list[int]) -> None:
    """Hand the deliveries to Celery; with ``WEBHOOK_SEND_INLINE`` (no broker) run the task here."""
    from apps.webhooks.tasks import deliver

    for pk in ids:
        try:
            if settings.WEBHOOK_SEND_INLINE:
                deliver.apply(args=[pk])
            else:
                deliver.apply_async(args=[pk])
        except Exception:
            log.exception("webhook delivery %s not queued; it stays pending in the delivery log", pk)


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def post(url: str, address, body: bytes, headers: dict) -> httpx.Response:
    """POST ``body`` to ``url`` over a connection to ``address``, the one its host was checked
    at; the host's name still goes in ``Host`` and in TLS (SNI and the certificate's check)."""
    target = httpx.URL(url)
    extensions = {}
    try:
        ipaddress.ip_address(target.host)
    except ValueError:
        name = target.raw_host.decode("ascii")
        headers = headers | {"Host": f"{name}:{target.port}" if target.port else name}
        extensions = {"sni_hostname": name}
        target = target.copy_with(host=str(address))
    with httpx.Client(timeout=settings.WEBHOOK_TIMEOUT_S) as client:
        return client.post(target, content=body, headers=headers, extensions=extensions)


def attempt(pk: int, last: bool) -> None:
    """One attempt at a pending delivery, recorded in the log. Raises ``DeliveryFailed`` when it
    failed and is not the ``last``; the last failed attempt marks the delivery failed."""
    delivery = WebhookDelivery.objects.select_related("webhook").filter(pk=pk).first()
    if delivery is None or delivery.state != WebhookDelivery.State.PENDING:
        return
    hook = delivery.webhook
    body = json.dumps(delivery.payload, separators=(",", ":")).encode()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "Klique-Webhook/1",
        "X-Klique-Event": delivery.kind,
        "X-Klique-Delivery": str(delivery.pk),
    }
    if hook.secret:
        headers["X-Klique-Signature"] = signature(hook.secret, body)
    status, error = None, ""
    try:
        answer = post(hook.url, send_address(hook.url), body, headers)
        status = answer.status_code
        if not 200 <= status < 300:
            error = f"HTTP {status}"  # never the answer's body: it is shown to the group's lead
    except ValidationError as exc:
        error = f"refused: {exc.messages[0]}"
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"[:1000]
    now = timezone.now()
    fields = {
        "attempts": delivery.attempts + 1,
        "last_status_code": status,
        "last_error": error,
        "last_attempt_at": now,
    }
    if not error:
        fields.update(state=WebhookDelivery.State.DELIVERED, delivered_at=now)
    elif last:
        fields.update(state=WebhookDelivery.State.FAILED)
    WebhookDelivery.objects.filter(pk=pk, state=WebhookDelivery.State.PENDING).update(**fields)
    if error and not last:
        raise DeliveryFailed(error)
    if error:
        log.warning(
            "webhook delivery %s to %s failed after %s attempts: %s", pk, hook, fields["attempts"], error
        )
