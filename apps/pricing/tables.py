import django_tables2 as tables

from apps.pricing.models import NodePrice, Price, PriceChange
from klique import numbers

NUMBER_ATTRS = {"td": {"class": "num"}, "th": {"class": "num"}}
# The audit trail's columns, in the portal and the admin alike.
PRICE_CHANGE_COLUMNS = (
    "at",
    "action",
    "gpu_type",
    "instance_type",
    "market",
    "currency",
    "before",
    "after",
    "actor",
    "via",
)


class PriceColumn(tables.Column):
    """A price per hour as a person reads it ("€2.10"), exported with its four decimals."""

    def __init__(self, **kwargs):
        super().__init__(attrs=NUMBER_ATTRS, **kwargs)

    def render(self, value, record):
        return numbers.price(value, record.currency)

    def value(self, value):
        return numbers.exact(value, 4)


class PriceTable(tables.Table):
    gpu_type = tables.Column(verbose_name="GPU type", order_by="gpu_type__name")
    per_gpu_hour = PriceColumn()
    effective_from = tables.DateColumn(format="Y-m-d", verbose_name="Effective from (00:00 UTC)")
    actions = tables.TemplateColumn(
        template_name="pricing/price_actions.html", verbose_name="", orderable=False
    )

    class Meta:
        model = Price
        fields = ["gpu_type", "currency", "per_gpu_hour", "effective_from"]
        attrs = {"class": "grid"}
        empty_text = "No prices yet: usage has no cost until a price is set."


class NodePriceTable(tables.Table):
    per_node_hour = PriceColumn()
    effective_from = tables.DateColumn(format="Y-m-d", verbose_name="Effective from (00:00 UTC)")
    actions = tables.TemplateColumn(
        template_name="pricing/node_price_actions.html", verbose_name="", orderable=False
    )

    class Meta:
        model = NodePrice
        fields = ["instance_type", "market", "currency", "per_node_hour", "effective_from"]
        attrs = {"class": "grid"}
        empty_text = "No node prices yet: cloud nodes have no cost until a price is set."


class PriceChangeTable(tables.Table):
    at = tables.DateTimeColumn(format="Y-m-d H:i:s", verbose_name="At (UTC)")
    gpu_type = tables.Column(verbose_name="GPU type", order_by="gpu_type__name")
    instance_type = tables.Column(verbose_name="Instance type")
    actor = tables.Column(verbose_name="By", default="(system)")
    before = tables.Column(orderable=False)
    after = tables.Column(orderable=False)

    class Meta:
        model = PriceChange
        fields = PRICE_CHANGE_COLUMNS
        attrs = {"class": "grid"}
        empty_text = "No price changes yet."

    def render_before(self, value):
        return _describe(value)

    def render_after(self, value):
        return _describe(value)


def _describe(values: dict) -> str:
    if not values:
        return "—"
    amount = values.get("per_gpu_hour") or values.get("per_node_hour")
    return f"{numbers.price(amount, values['currency'])} from {values['effective_from']}"
