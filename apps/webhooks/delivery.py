"""Send one webhook delivery: sign the body, POST it to the address its host was checked at, and
record the attempt; the Celery task (``tasks.deliver``) retries a failed one."""

import hashlib
import hmac
import ipaddress
import json
import logging

import httpx
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.webhooks.models import WebhookDelivery, send_address

log = logging.getLogger("klique.webhooks")


class DeliveryFailed(Exception):
    """One attempt failed (non-2xx answer, timeout, connection error); Celery retries it."""


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
