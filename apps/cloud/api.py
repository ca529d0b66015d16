"""The cloud's part of the API: a usage report's ``cloud_spend`` (``/api/v1/usage/report/``), what
every cloud node cost in the report's range, for those who may see the estate's unused capacity
(IT, and leadership and finance at the root). Registered on ``apps.ledger.api.serializers.REPORT_EXTRAS``."""

from apps.cloud import selectors
from apps.ledger import visibility
from apps.ledger.api.serializers import cloud_data


def report_extra(user, spec) -> dict:
    if not visibility.may_see_unused_capacity(user):
        return {}
    return {"cloud_spend": cloud_data(selectors.spend(spec.start, spec.end, spec.currency))}
