"""IT configures each group's webhooks here and reads the delivery log (read-only)."""

from django.contrib import admin, messages
from django.db import transaction

from apps.webhooks import services
from apps.webhooks.forms import WebhookAdminForm
from apps.webhooks.models import Webhook, WebhookDelivery


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    form = WebhookAdminForm
    list_display = ["__str__", "group", "format", "kinds", "enabled", "signed", "created_at"]
    list_filter = ["format", "enabled", "group__kind"]
    search_fields = ["name", "url", "group__name"]
    autocomplete_fields = ["group"]
    list_select_related = ["group"]
    actions = ["send_test_message"]

    @admin.display(boolean=True, description="signed")
    def signed(self, webhook: Webhook) -> bool:
        return bool(webhook.secret)

    @admin.action(description="Send a test message")
    def send_test_message(self, request, queryset):
        with transaction.atomic():
            for webhook in queryset:
                services.send_test(webhook)
        self.message_user(
            request,
            f"Test message queued to {queryset.count()} webhook(s); see the delivery log for the result.",
            messages.SUCCESS,
        )


@admin.register(WebhookDelivery)
class WebhookDeliveryAdmin(admin.ModelAdmin):
    list_display = ["created_at", "webhook", "kind", "state", "attempts", "last_status_code", "delivered_at"]
    list_filter = ["state", "kind", "webhook__format", "webhook__group"]
    search_fields = ["webhook__name", "webhook__url", "webhook__group__name", "last_error"]
    list_select_related = ["webhook__group"]
    date_hierarchy = "created_at"
    readonly_fields = [
        "webhook",
        "kind",
        "payload",
        "state",
        "attempts",
        "last_status_code",
        "last_error",
        "created_at",
        "last_attempt_at",
        "delivered_at",
    ]
    actions = ["send_again"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_resend_permission(self, request) -> bool:
        return request.user.has_perm("webhooks.change_webhook")

    @admin.action(description="Send the failed deliveries again", permissions=["resend"])
    def send_again(self, request, queryset):
        with transaction.atomic():
            sent = services.resend(list(queryset))
        self.message_user(request, f"{sent} failed delivery(ies) queued again.", messages.SUCCESS)
