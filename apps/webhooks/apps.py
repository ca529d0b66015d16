from django.apps import AppConfig


class WebhooksConfig(AppConfig):
    name = "apps.webhooks"
    label = "webhooks"
    verbose_name = "Webhooks"

    def ready(self) -> None:
        """Every group notice (apps.core.events) becomes deliveries to the webhooks subscribed."""
        from apps.core import events
        from apps.webhooks import services

        events.listen(services.on_group_notice, interested=services.any_enabled)
