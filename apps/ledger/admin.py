from django.contrib import admin
from django.db import models

from apps.core.fields import PLAIN_NUMBERS, PlainIntegerFormField
from apps.core.formsets import CappedInline
from apps.ledger.models import Adjustment, MonthClose, MonthCloseEvent, UsageInterval


@admin.register(UsageInterval)
class UsageIntervalAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    list_display = ["task", "user", "policy", "pool", "gpus", "time_weight", "start", "end"]
    list_filter = ["pool", "gpu_type", "policy"]
    search_fields = ["task__name", "user__username"]
    list_select_related = ["task", "user", "policy__group", "pool"]
    date_hierarchy = "start"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class ReadOnly(admin.ModelAdmin):
    """Closes, frozen figures, adjustments and their audit change only through the month close
    (``apps.ledger.closing``): the admin shows them, read-only."""

    formfield_overrides = PLAIN_NUMBERS | {models.BigIntegerField: {"form_class": PlainIntegerFormField}}

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class MonthCloseEventInline(CappedInline, admin.TabularInline):
    model = MonthCloseEvent
    extra = 0
    fields = ["action", "actor", "at", "reason"]
    readonly_fields = fields
    has_add_permission = has_change_permission = has_delete_permission = ReadOnly.has_delete_permission


@admin.register(MonthClose)
class MonthCloseAdmin(ReadOnly):
    list_display = ["month", "closed_at", "closed_by", "reopened_at", "reopened_by", "reopen_reason"]
    list_select_related = ["closed_by", "reopened_by"]
    inlines = [MonthCloseEventInline]


@admin.register(Adjustment)
class AdjustmentAdmin(ReadOnly):
    list_display = [
        "closed_month",
        "booked_in",
        "group",
        "project",
        "gpu_type",
        "cost",
        "currency",
        "actor",
        "at",
    ]
    list_filter = ["closed_month", "booked_in", "currency"]
    list_select_related = ["group", "project", "gpu_type", "actor"]
    search_fields = ["reason", "group__name"]


# the resource policies' admin, with each policy's use in its list
from apps.ledger import admin_policies  # noqa: E402, F401
