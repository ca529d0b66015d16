"""The admin of an audit trail (``apps.core.audit``): read only, as an audit trail must be. Rows are
written only by the services that make the changes."""

from django.contrib import admin


class AuditTrailAdmin(admin.ModelAdmin):
    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False
