from django import forms

from apps.pricing.models import Price


class PriceForm(forms.ModelForm):
    class Meta:
        model = Price
        fields = ["gpu_type", "currency", "per_gpu_hour", "effective_from"]
        widgets = {"effective_from": forms.DateInput(attrs={"type": "date"})}
