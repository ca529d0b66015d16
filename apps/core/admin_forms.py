"""Form helpers the admin's inlines share across apps."""

from django import forms
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError


class LinkRowForm(forms.ModelForm):
    """An inline row whose model rules may name the hidden link to the parent (a compute resource's
    ``profile`` on the profile's page): those messages are shown as the row's own errors, not
    attached to a field the page does not show."""

    def add_error(self, field, error):
        if field is None and isinstance(error, ValidationError) and hasattr(error, "error_dict"):
            hidden = {name for name, form_field in self.fields.items() if form_field.widget.is_hidden}
            moved: dict[str, list] = {}
            for name, messages in error.error_dict.items():
                moved.setdefault(NON_FIELD_ERRORS if name in hidden else name, []).extend(messages)
            error = ValidationError(moved)
        super().add_error(field, error)
