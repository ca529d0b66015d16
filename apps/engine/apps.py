from django.apps import AppConfig


class EngineConfig(AppConfig):
    name = "apps.engine"
    label = "engine"
    verbose_name = "Engine"

    def ready(self) -> None:
        """The age of the last pass joins the readiness probe; the windows the engine was disabled
        in are not charged to time budgets."""
        from apps.core.health import APP_CHECKS
        from apps.engine.health import last_pass
        from apps.engine.models import DisabledWindow
        from apps.ledger.budgets import UNCHARGED

        APP_CHECKS["engine"] = last_pass
        UNCHARGED["engine"] = DisabledWindow.spans
