"""``/api/v1/usage/prices/``: the price list, for external billing. Read-only: finance changes
prices in the portal or the admin, where every change is audited."""

from rest_framework import generics

from apps.pricing import selectors
from apps.pricing.api.serializers import PriceSerializer
from apps.pricing.filters import PriceFilter


class PriceList(generics.ListAPIView):
    """Prices per GPU-hour, each in effect from 00:00 UTC of its day until the next one."""

    serializer_class = PriceSerializer
    filterset_class = PriceFilter

    def get_queryset(self):
        return selectors.prices()
