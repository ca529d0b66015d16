from django.contrib import admin

from apps.core.fields import PLAIN_NUMBERS
from apps.ledger.models import UsageInterval


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
