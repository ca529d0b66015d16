from django import forms

from apps.core.fields import PlainDecimalFormField
from apps.pricing.models import NodePrice, Price


class PriceForm(forms.ModelForm):
    class Meta:
        model = Price
        fields = ["gpu_type", "currency", "per_gpu_hour", "effective_from"]
        field_classes = {"per_gpu_hour": PlainDecimalFormField}
        widgets = {"effective_from": forms.DateInput(attrs={"type": "date"})}


class NodePriceForm(forms.ModelForm):
    class Meta:
        model = NodePrice
        fields = ["instance_type", "market", "currency", "per_node_hour", "effective_from"]
        field_classes = {"per_node_hour": PlainDecimalFormField}
        widgets = {"effective_from": forms.DateInput(attrs={"type": "date"})}
