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

        from apps.accounts.agents import USAGE_READERS
        from apps.ledger.agents import spend_figures

        if spend_figures not in USAGE_READERS:
            USAGE_READERS.append(spend_figures)
