from django import forms

from apps.core.fields import PlainDecimalFormField
from apps.pricing.models import NodePrice, Price
from klique import numbers


class PlainPriceForm(forms.ModelForm):
    """A price's form: the price shown as the form reads it back, without trailing zeros ("2.1")."""

    price_field = ""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.initial.get(self.price_field) is not None:
            self.initial[self.price_field] = numbers.plain(self.initial[self.price_field])


class PriceForm(PlainPriceForm):
    price_field = "per_gpu_hour"

    class Meta:
        model = Price
        fields = ["gpu_type", "currency", "per_gpu_hour", "effective_from"]
        field_classes = {"per_gpu_hour": PlainDecimalFormField}
        widgets = {"effective_from": forms.DateInput(attrs={"type": "date"})}


class NodePriceForm(PlainPriceForm):
    price_field = "per_node_hour"

    class Meta:
        model = NodePrice
        fields = ["instance_type", "market", "currency", "per_node_hour", "effective_from"]
        field_classes = {"per_node_hour": PlainDecimalFormField}
        widgets = {"effective_from": forms.DateInput(attrs={"type": "date"})}
