"""The audit trail of quota changes in IT's admin: read only, as an audit trail must be."""

from django.contrib import admin

from apps.accounts.admin_scope import TenantScoped
from apps.core.audit_admin import AuditTrailAdmin
from apps.policies.models import PolicyChange


@admin.register(PolicyChange)
class PolicyChangeAdmin(TenantScoped, AuditTrailAdmin):
    tenant_group = "policy__group"
    list_display = ["at", "policy", "actor", "via", "changes"]
    list_filter = ["via"]
    search_fields = ["policy__group__name", "actor__username"]
    list_select_related = ["policy__group", "actor"]
    fields = ["policy", "at", "actor", "via", "changes"]
