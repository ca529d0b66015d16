"""IT's admin for maintenance windows: schedule, move, end early; every save goes through
``apps.pools.services.maintenance`` (checked, audited), and the audit trail shows read-only."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.core.audit_admin import AuditTrailAdmin
from apps.core.formsets import CappedInline
from apps.pools.models import MaintenanceChange, MaintenanceWindow
from apps.pools.services import maintenance


@admin.register(MaintenanceChange)
class MaintenanceChangeAdmin(AuditTrailAdmin):
    list_display = ["at", "window", "actor", "via"]
    list_filter = ["via"]


class MaintenanceChangeInline(CappedInline, admin.TabularInline):
    model = MaintenanceChange
    fields = ["at", "actor", "via", "changes"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


class WindowForm(forms.ModelForm):
    """The services' checks that are not the model's: a window ends in the future, and one that
    is over is not changed."""

    def clean(self):
        data = super().clean()
        now = timezone.now()
        window = self.instance
        if window.pk is not None and (window.called_off or window.end <= now):
            raise ValidationError("This window is over; schedule a new one.")
        ends = data.get("ends_at")
        if ends is not None and ends <= now and "ends_at" in self.changed_data:
            self.add_error("ends_at", "The end must be in the future.")
        return data


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(admin.ModelAdmin):
    form = WindowForm
    list_display = ["pool", "starts_at", "ends_at", "ended_at", "note", "status"]
    list_filter = ["pool"]
    fields = ["pool", "starts_at", "ends_at", "note", "ended_at", "created_by"]
    readonly_fields = ["ended_at", "created_by"]
    date_hierarchy = "starts_at"
    inlines = [MaintenanceChangeInline]
    actions = ["end_now"]

    @admin.display(description="status")
    def status(self, window: MaintenanceWindow) -> str:
        now = timezone.now()
        if window.called_off:
            return "called off"
        if window.end <= now:
            return "over"
        return "in force" if window.starts_at <= now else "ahead"

    def get_readonly_fields(self, request, obj=None):
        return [*self.readonly_fields, "pool"] if obj is not None else self.readonly_fields

    def save_model(self, request, obj, form, change):
        """Through the services: the rules, the pool's lock and the audit trail."""
        if change:
            fields = {f: form.cleaned_data[f] for f in form.changed_data if f in maintenance.FIELDS}
            saved = maintenance.change(obj, actor=request.user, **fields)
        else:
            saved = maintenance.schedule(
                obj.pool,
                starts_at=obj.starts_at,
                ends_at=obj.ends_at,
                note=obj.note,
                actor=request.user,
            )
        obj.pk = saved.pk

    def has_delete_permission(self, request, obj=None):
        return False  # ended early, never deleted: the audit trail stays

    @admin.action(description="End the selected windows now (call off those not started)")
    def end_now(self, request, queryset):
        for window in queryset:
            try:
                maintenance.end_now(window, actor=request.user)
            except ValidationError as error:
                self.message_user(request, f"{window}: {' '.join(error.messages)}", messages.WARNING)
            else:
                self.message_user(request, f"{window}: ended.")
