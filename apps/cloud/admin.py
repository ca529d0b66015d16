from django.contrib import admin
from django.urls import reverse
from django.utils.html import format_html

from apps.accounts.models import Membership
from apps.accounts.selectors import has_role
from apps.cloud import services
from apps.cloud.models import (
    CloudBill,
    CloudBillBooking,
    CloudBillLine,
    CloudNode,
    CloudPool,
    CloudSpendCap,
    CloudSpendCapChange,
    InstanceType,
)
from apps.core.audit_admin import AuditTrailAdmin, ReadOnlyAdmin
from apps.core.fields import PLAIN_NUMBERS
from apps.core.formsets import CappedInline
from apps.core.parsers import JSON_FIELDS


class InstanceTypeInline(CappedInline, admin.TabularInline):
    model = InstanceType
    fields = ["rank", "name", "gpus", "max_count", "spot"]
    ordering = ["rank", "pk"]
    extra = 0
    verbose_name_plural = "instance types (tried in this order)"
    formfield_overrides = PLAIN_NUMBERS


@admin.register(CloudPool)
class CloudPoolAdmin(admin.ModelAdmin):
    """A pool of kind cloud that the autoscaler grows and shrinks. Its declared capacity is kept at
    the sum of its types' most instances x GPUs per instance."""

    list_display = ["pool", "provider", "enabled", "capacity", "boot_timeout_s", "idle_timeout_s"]
    list_filter = ["provider", "enabled"]
    fields = [
        "pool",
        "provider",
        "settings",
        "enabled",
        "capacity",
        "boot_timeout_s",
        "idle_timeout_s",
        "spot_timeout_s",
    ]
    readonly_fields = ["capacity"]
    inlines = [InstanceTypeInline]
    formfield_overrides = PLAIN_NUMBERS | JSON_FIELDS

    @admin.display(description="declared capacity (GPUs)")
    def capacity(self, obj: CloudPool):
        return obj.pool.capacity if obj.pk else "-"

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        services.sync_capacity(form.instance)


@admin.register(CloudNode)
class CloudNodeAdmin(ReadOnlyAdmin):
    """Every node the autoscaler launched: read-only, the record of what it did and why."""

    list_display = [
        "name",
        "cloud_pool",
        "instance_type_name",
        "gpus",
        "market",
        "state",
        "launched_at",
        "enrolled_at",
        "terminated_at",
        "reason",
    ]
    list_filter = ["cloud_pool", "state", "market"]
    search_fields = ["name", "instance_id"]
    date_hierarchy = "launched_at"

    def get_readonly_fields(self, request, obj=None):
        return [field.name for field in CloudNode._meta.fields]


CAP_VIA = CloudSpendCapChange.Via.ADMIN


@admin.register(CloudSpendCap)
class CloudSpendCapAdmin(admin.ModelAdmin):
    """Leadership's monthly cloud spend caps. IT changes them here; each save and removal goes
    through ``apps.cloud.services`` and is audited."""

    formfield_overrides = PLAIN_NUMBERS
    list_display = ["group", "amount", "currency", "set_by", "updated_at"]
    list_select_related = ["group", "set_by"]
    fields = ["group", "amount", "currency", "set_by", "updated_at"]

    def get_readonly_fields(self, request, obj=None):
        return ["set_by", "updated_at", *(["group"] if obj else [])]

    def _may_edit(self, request) -> bool:
        return has_role(request.user, Membership.Role.IT_ADMIN)

    def has_add_permission(self, request):
        return self._may_edit(request) and super().has_add_permission(request)

    def has_change_permission(self, request, obj=None):
        return self._may_edit(request) and super().has_change_permission(request, obj)

    def has_delete_permission(self, request, obj=None):
        return self._may_edit(request) and super().has_delete_permission(request, obj)

    def save_model(self, request, obj, form, change):
        cap = services.set_cap(obj.group, obj.amount, obj.currency, actor=request.user, via=CAP_VIA)
        obj.pk, obj.set_by, obj.updated_at = cap.pk, cap.set_by, cap.updated_at

    def delete_model(self, request, obj):
        services.remove_cap(obj, actor=request.user, via=CAP_VIA)

    def delete_queryset(self, request, queryset):
        for cap in queryset.select_related("group"):
            services.remove_cap(cap, actor=request.user, via=CAP_VIA)


@admin.register(CloudSpendCapChange)
class CloudSpendCapChangeAdmin(AuditTrailAdmin):
    """Every change to a cloud spend cap: read-only."""

    list_display = ["at", "action", "group", "before", "after", "actor", "via"]
    list_filter = ["action", "via"]
    date_hierarchy = "at"
    list_select_related = ["group", "actor"]
    fields = ["cap", "group", "action", "before", "after", "actor", "via", "at"]


@admin.register(CloudBill)
class CloudBillAdmin(ReadOnlyAdmin):
    """Imported cloud bills (CUR 2.0 files), read-only: finance imports them on the portal's cloud
    bill page or the API. Their lines are listed under *Cloud bill lines*, filtered by import (a
    month's bill has thousands: no inline)."""

    list_display = [
        "month",
        "file_name",
        "file_format",
        "currency",
        "rows_kept",
        "lines_matched",
        "imported_by",
        "imported_at",
        "via",
        "lines",
    ]
    list_select_related = ["imported_by"]
    date_hierarchy = "imported_at"

    @admin.display(description="lines")
    def lines(self, obj: CloudBill):
        url = reverse("admin:cloud_cloudbillline_changelist") + f"?bill__id__exact={obj.pk}"
        return format_html('<a href="{}">{} lines</a>', url, obj.rows_kept)


@admin.register(CloudBillLine)
class CloudBillLineAdmin(ReadOnlyAdmin):
    list_display = [
        "instance_id",
        "usage_start",
        "usage_end",
        "hours",
        "cost",
        "rate",
        "instance_type",
        "node",
        "tagged_pool",
        "bill",
    ]
    list_filter = ["bill"]
    list_select_related = ["node", "bill"]
    search_fields = ["instance_id"]


@admin.register(CloudBillBooking)
class CloudBillBookingAdmin(AuditTrailAdmin):
    """Every booked cloud bill difference: read-only, like the adjustment it booked."""

    list_display = ["at", "cloud_pool", "month", "amount", "currency", "actor", "via", "adjustment"]
    list_select_related = ["cloud_pool__pool", "actor", "adjustment"]
    date_hierarchy = "at"
    fields = ["cloud_pool", "month", "bill", "adjustment", "amount", "currency", "actor", "via", "at"]
