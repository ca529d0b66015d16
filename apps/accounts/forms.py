from datetime import timedelta

from django import forms
from django.utils import timezone

EXPIRY_CHOICES = [("30", "30 days"), ("90", "90 days"), ("365", "1 year"), ("", "Never")]


class ApiTokenForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the token is for, e.g. laptop or pipeline.")
    expires_in = forms.ChoiceField(choices=EXPIRY_CHOICES, initial="90", required=False, label="Expires in")

    def expires_at(self):
        days = self.cleaned_data.get("expires_in")
        return timezone.now() + timedelta(days=int(days)) if days else None
