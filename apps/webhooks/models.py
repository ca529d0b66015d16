"""Webhooks: a group's Slack, Teams or generic JSON endpoint for its events, and the delivery log."""

import ipaddress
import socket
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

KINDS = ("budget_alert", "preemption", "idle_stop", "change_request")


def all_kinds() -> list[str]:
    return list(KINDS)


def internal_address(hostname: str) -> str | None:
    """The loopback, private, link-local, reserved or multicast address the host is or resolves
    to, or None. A host that does not resolve here is not refused (its sending fails later)."""
    try:
        addresses = [ipaddress.ip_address(hostname)]
    except ValueError:
        try:
            addresses = [ipaddress.ip_address(info[4][0]) for info in socket.getaddrinfo(hostname, None)]
        except (OSError, UnicodeError):
            return None
    for address in addresses:
        if (
            address.is_loopback
            or address.is_private
            or address.is_link_local
            or address.is_reserved
            or address.is_multicast
            or address.is_unspecified
        ):
            return str(address)
    return None


def validate_url(url: str) -> None:
    """https everywhere; plain http only to the hosts of ``WEBHOOK_HTTP_HOSTS`` (development,
    tests). Internal addresses (loopback, private, link-local: a cloud's metadata service) are
    refused unless the host is in ``WEBHOOK_HTTP_HOSTS``, so that a webhook cannot make the server
    call inside its own network."""
    parts = urlsplit(url or "")
    if not parts.hostname:
        raise ValidationError("Enter a full URL, e.g. https://hooks.slack.com/services/...")
    allowed = parts.hostname in settings.WEBHOOK_HTTP_HOSTS
    if parts.scheme not in ("https", "http") or (parts.scheme == "http" and not allowed):
        raise ValidationError("A webhook URL must use https.")
    internal = None if allowed else internal_address(parts.hostname)
    if internal:
        raise ValidationError(
            f"{parts.hostname} is an internal address ({internal}); a webhook goes to outside services."
        )


class Webhook(models.Model):
    class Format(models.TextChoices):
        SLACK = "slack", "Slack (incoming webhook)"
        TEAMS = "teams", "Microsoft Teams (Adaptive Card)"
        GENERIC = "generic", "Generic JSON"

    class Kind(models.TextChoices):
        BUDGET_ALERT = "budget_alert", "Budget alerts"
        PREEMPTION = "preemption", "Preemptions"
        IDLE_STOP = "idle_stop", "Idle stops"
        CHANGE_REQUEST = "change_request", "Change-request decisions"

    group = models.ForeignKey("accounts.Group", on_delete=models.CASCADE, related_name="webhooks")
    name = models.CharField(max_length=120, blank=True)
    url = models.URLField(max_length=1000, validators=[validate_url])
    format = models.CharField(max_length=10, choices=Format.choices, default=Format.SLACK)
    kinds = models.JSONField(
        default=all_kinds,
        blank=True,
        help_text="Events sent: budget_alert, preemption, idle_stop, change_request.",
    )
    enabled = models.BooleanField(default=True)
    secret = models.CharField(
        max_length=200,
        blank=True,
        help_text="Optional: each request then carries X-Klique-Signature: sha256=<HMAC-SHA256 of the body>.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["group__name", "pk"]

    def __str__(self) -> str:
        return self.name or f"{self.get_format_display()} webhook of {self.group}"

    def clean(self) -> None:
        kinds = self.kinds if isinstance(self.kinds, list) else None
        if kinds is None or any(kind not in KINDS for kind in kinds):
            raise ValidationError({"kinds": f"A list of event kinds out of: {', '.join(KINDS)}."})
        if len(set(kinds)) != len(kinds):
            raise ValidationError({"kinds": "Each kind once."})

    def subscribes(self, kind: str) -> bool:
        return kind in (self.kinds or [])


class WebhookDelivery(models.Model):
    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        DELIVERED = "delivered", "Delivered"
        FAILED = "failed", "Failed"

    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    kind = models.CharField(max_length=20, choices=[*Webhook.Kind.choices, ("test", "Test message")])
    payload = models.JSONField(help_text="The exact JSON body sent at every attempt.")
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    delivered_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-pk"]
        verbose_name_plural = "webhook deliveries"
        indexes = [models.Index(fields=["state", "created_at"], name="webhook_delivery_state")]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} to {self.webhook} ({self.state})"
