"""The parameters of a usage report, for the report page, its exports and the API alike. Every
parameter is optional: a bare request is this month's report by group."""

from datetime import UTC, timedelta

from django import forms
from django.utils import timezone

from apps.accounts.models import Group, Project, User
from apps.ledger.report_spec import IDLE_SEPARATE, IDLE_SPREAD, PERIODS, ReportSpec, period_range
from apps.pools.models import GpuType, Pool
from apps.pricing.selectors import currencies

DIMENSION_CHOICES = [
    ("group", "Group, with its subtree"),
    ("project", "Project"),
    ("user", "User"),
    ("gpu_type", "GPU type"),
    ("pool", "Pool"),
]
MAX_RANGE = timedelta(days=5 * 366)
LEAVES = "leaves"


def _unknown(what: str) -> dict[str, str]:
    return {"invalid_choice": f"Unknown {what} %(value)s."}


# Reports cover what a ledger can hold; outside this, date arithmetic would overflow.
MIN_YEAR, MAX_YEAR = 1970, 9000


IDLE_CHOICES = [("", "not shown"), (IDLE_SEPARATE, "shown separately"), (IDLE_SPREAD, "spread over the rows")]


def known_currency(value: str) -> str:
    """A currency with prices (default: the first known), upper case; refused naming the known."""
    known = currencies()
    currency = (value or known[0]).upper()
    if currency not in known:
        raise forms.ValidationError(f"No prices in {currency}; known currencies: {', '.join(known)}.")
    return currency


class ReportForm(forms.Form):
    by = forms.ChoiceField(choices=DIMENSION_CHOICES, required=False, help_text="What each row is.")
    then_by = forms.ChoiceField(
        label="then by",
        choices=[("", "—"), *DIMENSION_CHOICES],
        required=False,
        help_text="Optional second cut.",
    )
    period = forms.ChoiceField(choices=[(p, p.capitalize()) for p in PERIODS], required=False)
    date = forms.DateField(
        required=False,
        widget=forms.DateInput(attrs={"type": "date"}),
        help_text="Any day of the period (UTC); today if empty.",
    )
    start = forms.DateTimeField(
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "2026-04-01 or 2026-04-01T06:00"}),
        help_text="Custom range: from (UTC, a date or a whole hour).",
    )
    end = forms.DateTimeField(
        required=False,
        widget=forms.TextInput(attrs={"placeholder": "2026-05-01"}),
        help_text="Custom range: until, not included.",
    )
    currency = forms.CharField(required=False, widget=forms.Select)
    group = forms.ModelChoiceField(
        Group.objects.all(),
        to_field_name="slug",
        required=False,
        empty_label="any",
        error_messages=_unknown("group"),
    )
    level = forms.ChoiceField(
        choices=[("", "every level"), *Group.Kind.choices],
        required=False,
        help_text="Group rows of one kind.",
    )
    rows = forms.ChoiceField(
        label="group rows",
        choices=[
            ("", "each with its subtree"),
            (LEAVES, "leaves only (own usage)"),
        ],
        required=False,
        help_text="Leaves only: each group's own usage, so the rows add up to the total.",
    )
    project = forms.ModelChoiceField(
        Project.objects.select_related("group"),
        required=False,
        empty_label="any",
        error_messages=_unknown("project"),
    )
    user = forms.ModelChoiceField(
        User.objects.all(),
        to_field_name="username",
        required=False,
        widget=forms.TextInput,
        error_messages=_unknown("user"),
    )
    gpu_type = forms.ModelChoiceField(
        GpuType.objects.all(),
        label="GPU type",
        to_field_name="name",
        required=False,
        empty_label="any",
        error_messages=_unknown("GPU type"),
    )
    pool = forms.ModelChoiceField(
        Pool.objects.all(),
        to_field_name="name",
        required=False,
        empty_label="any",
        error_messages=_unknown("pool"),
    )
    idle = forms.ChoiceField(label="unused capacity", choices=IDLE_CHOICES, required=False)

    def __init__(self, data=None, *args, **kwargs):
        known = currencies()
        if data is not None:
            # What an empty parameter means is shown selected, so that the form says what the
            # report shows and pressing Show again keeps it.
            data = data.copy()
            for name, default in (("by", "group"), ("period", "month"), ("currency", known[0])):
                if not data.get(name):
                    data[name] = default
        super().__init__(data, *args, **kwargs)
        self.fields["currency"].widget.choices = [(c, c) for c in known]

    def clean_currency(self) -> str:
        return known_currency(self.cleaned_data["currency"])

    def clean(self):
        data = super().clean()
        data["by"] = data.get("by") or "group"
        data["period"] = data.get("period") or "month"
        if data.get("then_by") and data["then_by"] == data["by"]:
            self.add_error("then_by", "Choose a second cut other than the first.")
        if data.get("level") and "group" not in (data["by"], data.get("then_by")):
            self.add_error("level", "A level applies only to a report by group.")
        if data.get("rows") and "group" not in (data["by"], data.get("then_by")):
            self.add_error("rows", "Leaves only applies only to a report by group.")
        if data["period"] == "custom":
            self._clean_custom(data)
        elif data.get("start") or data.get("end"):
            self.add_error("start", "Start and end go with period=custom.")
        else:
            day = data.get("date") or timezone.now().date()
            if not MIN_YEAR <= day.year <= MAX_YEAR:
                self.add_error("date", f"Choose a date between {MIN_YEAR} and {MAX_YEAR}.")
            else:
                data["start"], data["end"] = period_range(data["period"], day)
        return data

    def _clean_custom(self, data) -> None:
        for name in ("start", "end"):
            value = data.get(name)
            if value is None:
                if name not in self.errors:
                    self.add_error(name, f"A custom range needs a {name}.")
                continue
            try:
                value = value.astimezone(UTC)
            except OverflowError:
                value = None
            if value is None or not MIN_YEAR <= value.year <= MAX_YEAR:
                self.add_error(name, f"The {name} must fall between {MIN_YEAR} and {MAX_YEAR}.")
                continue
            if value.minute or value.second or value.microsecond:
                self.add_error(name, f"The {name} must be on a whole UTC hour.")
            else:
                data[name] = value
        start, end = data.get("start"), data.get("end")
        if start is None or end is None or self.errors:
            return
        if end <= start:
            self.add_error("end", "The end must come after the start.")
        elif end - start > MAX_RANGE:
            self.add_error("end", "A report covers at most five years.")

    def spec(self) -> ReportSpec:
        data = self.cleaned_data
        return ReportSpec(
            dims=(data["by"], data["then_by"]) if data.get("then_by") else (data["by"],),
            start=data["start"],
            end=data["end"],
            currency=data["currency"],
            group=data.get("group"),
            project=data.get("project"),
            user=data.get("user"),
            gpu_type=data.get("gpu_type"),
            pool=data.get("pool"),
            level=data.get("level") or "",
            leaves=data.get("rows") == LEAVES,
            idle=data.get("idle") or "",
        )
