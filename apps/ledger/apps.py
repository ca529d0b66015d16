from django.apps import AppConfig


class LedgerConfig(AppConfig):
    name = "apps.ledger"
    label = "ledger"
    verbose_name = "Usage ledger"

    def ready(self) -> None:
        """A GPU price change reaching into closed months is booked as adjustments (closing)."""
        from apps.ledger import closing
        from apps.pricing.events import gpu_price_changed

        gpu_price_changed.connect(closing.on_gpu_price_changed, dispatch_uid="ledger.closing")
