"""The parameters of a monthly statement and of the per-cost-centre cut."""

from datetime import date

from django import forms
from django.utils import timezone

from apps.accounts.models import Group
from apps.ledger.forms import IDLE_CHOICES, known_currency
from apps.ledger.statements import STATEMENT_KINDS
from apps.pricing.selectors import currencies

FORMATS = ("pdf", "csv")


def last_month() -> date:
    today = timezone.now().date().replace(day=1)
    return date(today.year - (today.month == 1), (today.month - 2) % 12 + 1, 1)


class MonthForm(forms.Form):
    month = forms.CharField(
        required=False,
        widget=forms.TextInput(attrs={"type": "month"}),
        help_text="The UTC month, as 2026-04; last month if empty.",
    )
    currency = forms.CharField(required=False, widget=forms.Select)

    def __init__(self, data=None, *args, **kwargs):
        known = currencies()
        if data is not None and not data.get("currency"):
            data = data.copy()
            data["currency"] = known[0]  # shown selected: the currency the statement is in
        super().__init__(data, *args, **kwargs)
        self.fields["currency"].widget.choices = [(c, c) for c in known]
        self.fields["currency"].initial = known[0]
        if not self.is_bound or not self.data.get("month"):
            self.initial.setdefault("month", f"{last_month():%Y-%m}")

    def clean_month(self) -> date:
        text = (self.cleaned_data["month"] or "").strip()
        if not text:
            return last_month()
        try:
            year, month = (int(part) for part in text.split("-")[:2])
            first = date(year, month, 1)
        except ValueError:
            raise forms.ValidationError(f"Give the month as YYYY-MM, not {text!r}.") from None
        if not 1970 <= year <= 9000:
            raise forms.ValidationError("Choose a month between 1970 and 9000.")
        if first > timezone.now().date().replace(day=1):
            raise forms.ValidationError("That month has not begun.")
        return first

    def clean_currency(self) -> str:
        return known_currency(self.cleaned_data["currency"])


class StatementForm(MonthForm):
    group = forms.ModelChoiceField(
        Group.objects.filter(kind__in=STATEMENT_KINDS).order_by("name"),
        to_field_name="slug",
        required=False,
        error_messages={"invalid_choice": "No business unit, department or team %(value)s."},
        help_text="A business unit, department or team.",
    )
    idle = forms.ChoiceField(label="unused capacity", choices=IDLE_CHOICES, required=False)
    format = forms.ChoiceField(choices=[("", "—"), *((f, f.upper()) for f in FORMATS)], required=False)

    def clean(self):
        data = super().clean()
        if data.get("format") and not data.get("group") and "group" not in self.errors:
            self.add_error("group", "Choose the group of the statement.")
        return data
