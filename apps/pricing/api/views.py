"""``/api/v1/usage/prices/`` and ``/api/v1/usage/prices/nodes/``: the price lists of GPU-hours
and cloud node-hours, for external billing. Read-only: finance changes
prices in the portal or the admin, where every change is audited."""

from rest_framework import generics

from apps.pricing import selectors
from apps.pricing.api.serializers import NodePriceSerializer, PriceSerializer
from apps.pricing.filters import NodePriceFilter, PriceFilter


class PriceList(generics.ListAPIView):
    """Prices per GPU-hour, each in effect from 00:00 UTC of its day until the next one."""

    serializer_class = PriceSerializer
    filterset_class = PriceFilter

    def get_queryset(self):
        return selectors.prices()


class NodePriceList(generics.ListAPIView):
    """Prices per cloud node-hour per instance type and market (spot or on demand), each in effect
    from 00:00 UTC of its day until the next one."""

    serializer_class = NodePriceSerializer
    filterset_class = NodePriceFilter

    def get_queryset(self):
        return selectors.node_prices()
