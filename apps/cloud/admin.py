from django.contrib import admin

from apps.cloud import services
from apps.cloud.models import CloudNode, CloudPool, InstanceType


class InstanceTypeInline(admin.TabularInline):
    model = InstanceType
    fields = ["rank", "name", "gpus", "max_count", "spot"]
    ordering = ["rank", "pk"]
    extra = 0
    verbose_name_plural = "instance types (tried in this order)"


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

    @admin.display(description="declared capacity (GPUs)")
    def capacity(self, obj: CloudPool):
        return obj.pool.capacity if obj.pk else "-"

    def save_related(self, request, form, formsets, change):
        super().save_related(request, form, formsets, change)
        services.sync_capacity(form.instance)


@admin.register(CloudNode)
class CloudNodeAdmin(admin.ModelAdmin):
    """Every node the autoscaler launched: read-only, the record of what it did and why."""

    list_display = [
        "name",
        "cloud_pool",
        "instance_type",
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

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
