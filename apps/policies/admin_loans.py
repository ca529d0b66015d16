"""IT's admin for dated quota loans: lend (through ``apps.policies.loans``, checked and audited),
see each loan's state and a give-back a rule refused, give back early."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError

from apps.core.errors import form_refusal
from apps.core.fields import PLAIN_NUMBERS
from apps.policies import loans
from apps.policies.admin_columns import loan_amount
from apps.policies.models import QuotaLoan


class LoanForm(forms.ModelForm):
    """Lends in ``clean`` (the admin's save runs in one transaction with it), so that a rule the
    loan breaks shows on the form with its reason."""

    class Meta:
        model = QuotaLoan
        fields = ["lender", "borrower", "what", "amount", "period", "ends_at", "note"]

    def clean(self):
        data = super().clean()
        if self.instance.pk is None and not self.errors:
            try:
                self.lent = loans.lend(
                    data["lender"],
                    data["borrower"],
                    what=data["what"],
                    amount=data["amount"],
                    until=data["ends_at"],
                    period=data.get("period") or "",
                    note=data.get("note") or "",
                    actor=self.actor,
                    via=QuotaLoan.Via.ADMIN,
                    check_permission=False,
                )
            except ValidationError as error:
                form_refusal(self, error, {"until": "ends_at"})
        return data


@admin.register(QuotaLoan)
class QuotaLoanAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    form = LoanForm
    list_display = [
        "lender",
        "borrower",
        "what",
        loan_amount,
        "period",
        "starts_at",
        "ends_at",
        "state",
        "revert_error",
    ]
    list_filter = ["state", "what"]
    fields = [
        "lender",
        "borrower",
        "what",
        "amount",
        "period",
        "ends_at",
        "note",
        "state",
        "starts_at",
        "ended_at",
        "ended_by",
        "created_by",
        "via",
        "revert_error",
    ]
    readonly_fields = ["state", "starts_at", "ended_at", "ended_by", "created_by", "via", "revert_error"]
    autocomplete_fields = ["lender", "borrower"]
    actions = ["give_back"]

    def get_readonly_fields(self, request, obj=None):
        if obj is None:
            return self.readonly_fields
        return self.fields  # a loan is changed by giving it back, never edited

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change, **kwargs)
        form.actor = request.user
        return form

    def save_model(self, request, obj, form, change):
        if not change:
            obj.pk = form.lent.pk  # lent by the form's clean

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.action(description="Give the selected loans back now")
    def give_back(self, request, queryset):
        for loan in queryset.filter(state=QuotaLoan.State.ACTIVE):
            try:
                loans.give_back(loan, actor=request.user)
            except ValidationError as error:
                self.message_user(request, f"{loan}: {' '.join(error.messages)}", messages.WARNING)
            else:
                self.message_user(request, f"{loan}: given back.")
