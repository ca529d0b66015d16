"""Change requests in the admin: listed with filters; decided only through ``services.decide``
(the change form's decision fields, or the action approving as asked), never by editing the row."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError

from apps.core.fields import GpuAmountFormField, PlainDecimalFormField
from apps.governance import services
from apps.governance.models import ChangeRequest
from apps.policies.models import PolicyChange
from apps.policies.services import QuotaChanged

VALUES = ("reservation_now", "limit_now", "budget_hours_now")


class DecisionAdminForm(forms.ModelForm):
    """The decision on the change form: saving with a decision calls the service; its refusal
    (a value that no longer fits, a missing comment) is shown on the form and nothing is saved."""

    decision = forms.ChoiceField(choices=[("", "no decision"), *services.Decision.CHOICES], required=False)
    reservation_now = GpuAmountFormField(label="Reservation to apply (GPUs)", min_value=0, required=False)
    limit_now = GpuAmountFormField(label="Limit to apply (GPUs)", min_value=0, required=False)
    budget_hours_now = PlainDecimalFormField(
        label="Time budget to apply (budget hours)",
        max_digits=12,
        decimal_places=3,
        min_value=0,
        required=False,
    )
    comment = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)

    actor = None  # set per request by ChangeRequestAdmin.get_form

    class Meta:
        model = ChangeRequest
        fields = []

    def clean(self):
        data = super().clean()
        if not data.get("decision") or self.errors:
            return data
        values = {name.removesuffix("_now"): data[name] for name in VALUES if data.get(name) is not None}
        try:
            services.decide(
                self.instance,
                actor=self.actor,
                decision=data["decision"],
                values=values,
                comment=data.get("comment", ""),
                via=PolicyChange.Via.ADMIN,
            )
        except (PermissionDenied, QuotaChanged) as error:
            raise ValidationError(str(error)) from error
        except ValidationError as error:
            for field, errors in error.message_dict.items():
                name = f"{field}_now" if f"{field}_now" in self.fields else field
                self.add_error(name if name in self.fields else None, errors)
        return data


@admin.register(ChangeRequest)
class ChangeRequestAdmin(admin.ModelAdmin):
    form = DecisionAdminForm
    list_display = ["created_at", "group", "kind", "requester", "state", "approver_role", "approver"]
    list_filter = ["state", "kind", "approver_role"]
    search_fields = ["group__name", "requester__username", "justification"]
    list_select_related = ["group", "requester", "approver"]
    actions = ["approve_as_asked"]
    fieldsets = [
        (
            None,
            {
                "fields": [
                    "group",
                    "kind",
                    "requester",
                    "reservation",
                    "limit",
                    "budget_hours",
                    "budget_period",
                    "profile",
                    "name",
                    "justification",
                    "state",
                    "approver_role",
                    "approver_group",
                    "approver",
                    "decision_comment",
                    "applied_values",
                    "applied_change",
                    "compute_resource",
                    "created_at",
                    "decided_at",
                ]
            },
        ),
        ("Decide", {"fields": ["decision", *VALUES, "comment"]}),
    ]

    def get_readonly_fields(self, request, obj=None):
        return [f.name for f in ChangeRequest._meta.fields if f.name != "id"]

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.actor = request.user
        return form

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def save_model(self, request, obj, form, change):
        """The decision was saved by the service in the form's ``clean``; the row is never edited."""
        obj.refresh_from_db()

    def save_related(self, request, form, formsets, change):
        pass

    @admin.action(description="Approve the selected requests as asked")
    def approve_as_asked(self, request, queryset):
        for change in queryset:
            try:
                services.decide(
                    change, actor=request.user, decision=services.Decision.APPROVE, via=PolicyChange.Via.ADMIN
                )
            except (PermissionDenied, QuotaChanged) as error:
                self.message_user(request, f"{change}: {error}", messages.ERROR)
            except ValidationError as error:
                self.message_user(request, f"{change}: {' '.join(error.messages)}", messages.ERROR)
            else:
                self.message_user(request, f"{change.group}: approved as asked.", messages.SUCCESS)
