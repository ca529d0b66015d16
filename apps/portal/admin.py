"""The audit trail of quota changes in IT's admin: read only, as an audit trail must be."""

from django.contrib import admin

from apps.accounts.admin_scope import TenantScoped
from apps.policies.models import PolicyChange


@admin.register(PolicyChange)
class PolicyChangeAdmin(TenantScoped, admin.ModelAdmin):
    tenant_group = "policy__group"
    list_display = ["at", "policy", "actor", "via", "changes"]
    list_filter = ["via"]
    search_fields = ["policy__group__name", "actor__username"]
    list_select_related = ["policy__group", "actor"]

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
