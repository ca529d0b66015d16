"""Queue webhook deliveries and manage webhooks. Deliveries are written in the caller's transaction
and handed to Celery only once it commits (``transaction.on_commit``); ``delivery`` sends them."""

import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from apps.webhooks import payloads
from apps.webhooks.models import KINDS, Webhook, WebhookDelivery
from apps.webhooks.tasks import deliver

log = logging.getLogger("klique.webhooks")


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
    for pk in ids:
        try:
            if settings.WEBHOOK_SEND_INLINE:
                deliver.apply(args=[pk])
            else:
                deliver.apply_async(args=[pk])
        except Exception:
            log.exception("webhook delivery %s not queued; it stays pending in the delivery log", pk)


def on_group_notice(sender, *, group, kind: str, title: str, text: str, link: str = "", **_) -> None:
    enqueue_for(group, kind, title, text, link)


def any_enabled() -> bool:
    return Webhook.objects.filter(enabled=True).exists()
