"""The portal's forms for change requests. They check the shape of the input; the rules are the
services'."""

from django import forms

from apps.accounts.models import Group
from apps.core.fields import GpuAmountFormField, PlainDecimalFormField, PlainIntegerFormField
from apps.governance.models import ChangeRequest
from apps.governance.services import Decision
from apps.policies.models import Profile, QuotaLoan, ResourcePolicy


def _quota_fields(form: forms.Form) -> None:
    form.fields["reservation"] = GpuAmountFormField(label="Reservation (GPUs)", min_value=0, required=False)
    form.fields["limit"] = GpuAmountFormField(label="Limit (GPUs)", min_value=0, required=False)
    form.fields["budget_hours"] = PlainDecimalFormField(
        label="Time budget (budget hours)", max_digits=12, decimal_places=3, min_value=0, required=False
    )


class RequestForm(forms.Form):
    """A request for a group: new quota values (each optional), a new compute resource, or a dated
    quota loan (one value, a lender and a date)."""

    kind = forms.ChoiceField(choices=ChangeRequest.Kind.choices, initial=ChangeRequest.Kind.QUOTA)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _quota_fields(self)
        self.fields["budget_period"] = forms.ChoiceField(
            label="Budget period (when the group has none yet)",
            choices=[("", "as now"), *ResourcePolicy.Period.choices],
            required=False,
        )
        self.fields["profile"] = forms.ModelChoiceField(
            Profile.objects.order_by("name"), required=False, label="Profile (new compute resource)"
        )
        self.fields["name"] = forms.CharField(
            max_length=120, required=False, label="Compute resource name (empty: group/profile)"
        )
        self.fields["lender"] = forms.ModelChoiceField(
            Group.objects.filter(policy__isnull=False).order_by("name"),
            required=False,
            label="Lender (dated quota loan: the group that would lend one of the values above)",
        )
        self.fields["loan_until"] = forms.DateTimeField(
            required=False,
            label="Lent until (dated quota loan; UTC, e.g. 2026-12-31 18:00)",
        )
        self.fields["justification"] = forms.CharField(widget=forms.Textarea(attrs={"rows": 4}))


class DecisionForm(forms.Form):
    """An approver's decision; the values are those to apply when approving with changes."""

    decision = forms.ChoiceField(choices=Decision.CHOICES, widget=forms.RadioSelect)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _quota_fields(self)
        self.fields["comment"] = forms.CharField(
            widget=forms.Textarea(attrs={"rows": 3}), required=False, label="Comment (required to deny)"
        )
        self.fields["version"] = PlainIntegerFormField(min_value=1, required=False, widget=forms.HiddenInput)

    def values(self) -> dict:
        return {
            f: self.cleaned_data[f]
            for f in ("reservation", "limit", "budget_hours")
            if self.cleaned_data.get(f) is not None
        }


class LendForm(forms.Form):
    """A dated quota loan between two groups under one department (or business unit): the shape of
    the input; ``apps.policies.loans`` checks the rules."""

    what = forms.ChoiceField(choices=QuotaLoan.What.choices, label="What to lend")
    amount = PlainDecimalFormField(label="Amount (GPUs, or budget hours)", max_digits=12, decimal_places=3)
    period = forms.ChoiceField(
        choices=[("", "the lender's main window"), *ResourcePolicy.Period.choices],
        required=False,
        label="Budget window (budget hours only)",
    )
    until = forms.DateTimeField(label="Lent until (UTC, e.g. 2026-12-31 18:00)")
    note = forms.CharField(max_length=200, required=False, label="Why (shown on both groups' pages)")

    def __init__(self, *args, groups, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["lender"] = forms.ModelChoiceField(groups, label="Lender")
        self.fields["borrower"] = forms.ModelChoiceField(groups, label="Borrower")
        self.order_fields(["lender", "borrower", "what", "amount", "period", "until", "note"])
