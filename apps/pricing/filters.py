from django_filters import rest_framework as filters

from apps.pricing.models import NodePrice, Price


class PriceFilter(filters.FilterSet):
    gpu_type = filters.CharFilter(
        field_name="gpu_type__name", label="GPU type", help_text="For example H100."
    )
    currency = filters.CharFilter(lookup_expr="iexact")
    effective_on_or_before = filters.DateFilter(
        field_name="effective_from", lookup_expr="lte", label="effective on or before"
    )

    class Meta:
        model = Price
        fields = ["gpu_type", "currency"]


class NodePriceFilter(filters.FilterSet):
    instance_type = filters.CharFilter(
        lookup_expr="iexact", label="instance type", help_text="The provider's name, e.g. p5.48xlarge."
    )
    market = filters.ChoiceFilter(choices=NodePrice._meta.get_field("market").choices)
    currency = filters.CharFilter(lookup_expr="iexact")
    effective_on_or_before = filters.DateFilter(
        field_name="effective_from", lookup_expr="lte", label="effective on or before"
    )

    class Meta:
        model = NodePrice
        fields = ["instance_type", "market", "currency"]
