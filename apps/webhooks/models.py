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


def internal(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Not a globally routable unicast address: loopback, private, link-local, carrier-grade NAT
    (100.64.0.0/10, where one cloud's metadata service answers), documentation, reserved,
    multicast, unspecified."""
    return not address.is_global or address.is_multicast


def resolve(hostname: str, port: int | None = None) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The addresses ``hostname`` is (an address literal) or resolves to, each once, in the
    resolver's order. ``OSError`` or ``UnicodeError`` when it does not resolve."""
    try:
        return [ipaddress.ip_address(hostname)]
    except ValueError:
        pass
    infos = socket.getaddrinfo(hostname, port, type=socket.SOCK_STREAM)
    return list(dict.fromkeys(ipaddress.ip_address(info[4][0]) for info in infos))


def internal_address(hostname: str) -> str | None:
    """The first address the host is or resolves to that is not globally routable, or None. A
    host that does not resolve here is not refused (its sending fails later)."""
    try:
        addresses = resolve(hostname)
    except (OSError, UnicodeError):
        return None
    return next((str(address) for address in addresses if internal(address)), None)


def _checked_scheme(url: str):
    """The URL's parts and whether its host is a development host (``WEBHOOK_HTTP_HOSTS``)."""
    parts = urlsplit(url or "")
    if not parts.hostname:
        raise ValidationError("Enter a full URL, e.g. https://hooks.slack.com/services/...")
    allowed = parts.hostname in settings.WEBHOOK_HTTP_HOSTS
    if parts.scheme not in ("https", "http") or (parts.scheme == "http" and not allowed):
        raise ValidationError("A webhook URL must use https.")
    return parts, allowed


def _refuse_internal(hostname: str, address: str) -> None:
    raise ValidationError(
        f"{hostname} is an internal address ({address}); a webhook goes to outside services."
    )


def validate_url(url: str) -> None:
    """https everywhere; plain http only to the hosts of ``WEBHOOK_HTTP_HOSTS`` (development,
    tests). A host that is or resolves to any address that is not globally routable is refused
    unless it is in ``WEBHOOK_HTTP_HOSTS``, so that a webhook cannot make the server call inside
    its own network."""
    parts, allowed = _checked_scheme(url)
    found = None if allowed else internal_address(parts.hostname)
    if found:
        _refuse_internal(parts.hostname, found)


def send_address(url: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The one address a delivery to ``url`` connects to: the URL checked as at saving, its host
    resolved once here and every address checked, so that no later lookup (DNS rebinding) can
    send it inside. ``ValidationError`` otherwise."""
    parts, allowed = _checked_scheme(url)
    try:
        addresses = resolve(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
    except (OSError, UnicodeError) as error:
        raise ValidationError(f"{parts.hostname} does not resolve: {error}") from None
    if not addresses:
        raise ValidationError(f"{parts.hostname} does not resolve.")
    found = None if allowed else next((a for a in addresses if internal(a)), None)
    if found:
        _refuse_internal(parts.hostname, str(found))
    return addresses[0]


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
