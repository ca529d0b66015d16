from django.apps import AppConfig


class CloudConfig(AppConfig):
    name = "apps.cloud"
    label = "cloud"
    verbose_name = "Cloud pools"

    def ready(self) -> None:
        """An autoscaled pool can grow to its instance types' maximum (submission's largest pool), and
        a usage report's JSON carries the cloud's spend."""
        from apps.cloud.api import report_extra
        from apps.cloud.selectors import pool_maximum
        from apps.ledger.api.serializers import REPORT_EXTRAS
        from apps.policies.selectors import POOL_CEILINGS

        if pool_maximum not in POOL_CEILINGS:
            POOL_CEILINGS.append(pool_maximum)
        if report_extra not in REPORT_EXTRAS:
            REPORT_EXTRAS.append(report_extra)
