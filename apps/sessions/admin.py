from django.contrib import admin

from apps.core.fields import PLAIN_NUMBERS
from apps.core.parsers import JSON_FIELDS
from apps.sessions.models import ProfileIdleLimits, ResourceIdleLimits, Session, SessionKind

LIMIT_FIELDSETS = [
    (
        "Idle limits (empty: off on a profile, the profile's on a compute resource)",
        {
            "fields": [
                "max_lifetime_s",
                ("cpu_idle_s", "cpu_below_pct"),
                ("gpu_idle_s", "gpu_below_pct"),
                "net_idle_s",
                "jupyter_idle_s",
            ]
        },
    )
]


@admin.register(SessionKind)
class SessionKindAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS | JSON_FIELDS
    list_display = ["name", "type", "ready_path", "enabled"]
    list_filter = ["type", "enabled"]
    search_fields = ["name"]


@admin.register(ProfileIdleLimits)
class ProfileIdleLimitsAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    list_display = ["profile", "max_lifetime_s", "cpu_idle_s", "gpu_idle_s", "net_idle_s", "jupyter_idle_s"]
    fieldsets = [(None, {"fields": ["profile"]}), *LIMIT_FIELDSETS]


@admin.register(ResourceIdleLimits)
class ResourceIdleLimitsAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    list_display = [
        "compute_resource",
        "max_lifetime_s",
        "cpu_idle_s",
        "gpu_idle_s",
        "net_idle_s",
        "jupyter_idle_s",
    ]
    fieldsets = [(None, {"fields": ["compute_resource"]}), *LIMIT_FIELDSETS]


@admin.register(Session)
class SessionAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    list_display = ["task", "kind", "ready", "url", "sampled_at", "stopped_by"]
    list_filter = ["kind", "ready", "stopped_by"]
    readonly_fields = [f.name for f in Session._meta.fields]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        """A session row goes with its task: without it the task could not run as a session."""
        return False
