"""The portal's "Start a session" form. It checks the shape of the input; the rules are the
services' (``apps.sessions.services.start``)."""

from django import forms

from apps.portal.forms import gpu_field
from apps.sessions.models import SessionKind

PREFIX = "session"


class StartSessionForm(forms.Form):
    compute_resource = forms.ModelChoiceField(
        queryset=None, help_text="Your group's compute resource for the GPU size."
    )
    session_kind = forms.ModelChoiceField(
        queryset=None, label="Session kind", help_text="What runs: a Jupyter server, an IDE, ..."
    )
    gpus = gpu_field(
        "GPUs",
        required=False,
        help_text="Only for a profile that takes the size from the task; empty: the profile's.",
    )
    name = forms.CharField(max_length=200, required=False)
    project = forms.ModelChoiceField(queryset=None, required=False)

    def __init__(self, *args, resources, projects, **kwargs):
        super().__init__(*args, prefix=PREFIX, **kwargs)
        self.fields["compute_resource"].queryset = resources
        self.fields["session_kind"].queryset = SessionKind.objects.filter(enabled=True).order_by("name")
        self.fields["project"].queryset = projects

    @classmethod
    def posted(cls, data) -> bool:
        """The POST is this form's (the work page also posts task submissions)."""
        return f"{PREFIX}-session_kind" in data
