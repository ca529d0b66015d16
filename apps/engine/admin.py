from django.contrib import admin, messages

from apps.core.fields import PLAIN_NUMBERS
from apps.engine import services
from apps.engine.models import DisabledWindow, EngineSwitch, PassRecord
from apps.engine.verdict_words import RULE_WORDS
from apps.tasks.admin import VerdictFilter


@admin.register(EngineSwitch)
class EngineSwitchAdmin(admin.ModelAdmin):
    """The engine switch: IT disables and enables the compute policy engine here."""

    list_display = ["__str__", "enabled", "changed_at", "changed_by"]
    readonly_fields = ["enabled", "changed_at", "changed_by"]
    actions = ["disable_engine", "enable_engine"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def changelist_view(self, request, extra_context=None):
        services.switch()
        return super().changelist_view(request, extra_context)

    @admin.action(description="Disable the engine (no passes; time is not charged to budgets)")
    def disable_engine(self, request, queryset):
        services.set_engine_enabled(False, actor=request.user)
        self.message_user(request, "The engine is disabled.", messages.WARNING)

    @admin.action(description="Enable the engine")
    def enable_engine(self, request, queryset):
        services.set_engine_enabled(True, actor=request.user)
        self.message_user(request, "The engine is enabled.")


@admin.register(DisabledWindow)
class DisabledWindowAdmin(admin.ModelAdmin):
    """Read only: deleting a window would charge its time to budgets after the fact."""

    list_display = ["start", "end", "disabled_by"]
    date_hierarchy = "start"

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


@admin.register(PassRecord)
class PassRecordAdmin(admin.ModelAdmin):
    """The pass log."""

    formfield_overrides = PLAIN_NUMBERS

    list_display = [
        "started_at",
        "runner",
        "skipped",
        "skip_reason",
        "duration_ms",
        "load_ms",
        "decide_ms",
        "apply_ms",
        "placed",
        "preempted",
        "waiting",
        "running",
        "queries",
    ]
    list_filter = ["skipped", "runner"]
    date_hierarchy = "started_at"

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


# The admin's "waits because" filter of tasks shows each rule in the engine's words (apps.tasks
# cannot import them: the engine is above it).
VerdictFilter.words = {rule: short for rule, (short, _) in RULE_WORDS.items()}
