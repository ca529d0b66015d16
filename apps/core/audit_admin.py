"""Read-only admins: of an audit trail (``apps.core.audit``), read only as an audit trail must be,
and of any record only its services write (imported files, cloud nodes). Rows are written only by
the services that make the changes."""

from django.contrib import admin

from apps.core.fields import PLAIN_NUMBERS


class ReadOnlyAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS

    def has_add_permission(self, request) -> bool:
        return False

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    def has_delete_permission(self, request, obj=None) -> bool:
        return False


class AuditTrailAdmin(ReadOnlyAdmin):
    """An audit trail's admin."""
