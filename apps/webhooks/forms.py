from django import forms

from apps.webhooks.models import Webhook


class WebhookForm(forms.ModelForm):
    url = forms.URLField(max_length=1000, assume_scheme="https", label="URL")
    kinds = forms.MultipleChoiceField(
        choices=Webhook.Kind.choices,
        widget=forms.CheckboxSelectMultiple,
        initial=list(Webhook.Kind.values),
        label="Events",
    )

    class Meta:
        model = Webhook
        fields = ["name", "url", "format", "kinds", "secret"]
        widgets = {"secret": forms.PasswordInput(render_value=False)}


class WebhookAdminForm(WebhookForm):
    """The admin's: any group, the enabled switch, and the secret shown to IT for editing."""

    class Meta(WebhookForm.Meta):
        fields = ["group", "name", "url", "format", "kinds", "enabled", "secret"]
        widgets = {"secret": forms.TextInput}
