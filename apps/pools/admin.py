from django.contrib import admin
from django.template.response import TemplateResponse
from django.utils import timezone

from apps.core.fields import PLAIN_NUMBERS
from apps.core.formsets import CappedInline
from apps.pools import services
from apps.pools.models import EnrolmentToken, GpuType, TaskLog, Worker
from klique import numbers


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    list_display = ["name", "memory_gb", "generation"]
    search_fields = ["name"]


class WorkerInline(CappedInline, admin.TabularInline):
    formfield_overrides = PLAIN_NUMBERS
    model = Worker
    fields = ["hostname", "state", "worker_gpus", "last_heartbeat"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False

    @admin.display(description="GPUs")
    def worker_gpus(self, worker: Worker) -> str:
        return numbers.gpus(worker.gpus)


@admin.register(EnrolmentToken)
class EnrolmentTokenAdmin(admin.ModelAdmin):
    """Tokens the worker daemons of a pool enrol with. A new token is shown once, right after it is
    saved; only its SHA-256 is kept."""

    list_display = ["name", "pool", "prefix", "created_at", "expires_at", "last_used_at", "revoked_at"]
    list_filter = ["pool"]
    search_fields = ["name", "prefix"]
    list_select_related = ["pool"]
    fields = [
        "pool",
        "name",
        "expires_at",
        "prefix",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke"]

    def get_readonly_fields(self, request, obj=None):
        fixed = ["prefix", "created_by", "created_at", "last_used_at", "revoked_at"]
        return fixed + ["pool"] if obj else fixed

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
        else:
            obj.raw_token = services.issue_enrolment_token(obj, created_by=request.user, now=timezone.now())

    def response_add(self, request, obj, post_url_continue=None):
        context = {
            **self.admin_site.each_context(request),
            "token": obj,
            "raw": obj.raw_token,
            "opts": self.opts,
        }
        context["title"] = f"Enrolment token for {obj.pool}"
        return TemplateResponse(request, "admin/pools/enrolmenttoken/created.html", context)

    @admin.action(description="Revoke the selected tokens (enrolled workers keep working)")
    def revoke(self, request, queryset):
        now = timezone.now()
        for token in queryset:
            services.revoke_enrolment_token(token, now)
        self.message_user(request, f"Revoked {numbers.plural(queryset.count(), 'enrolment token')}.")


@admin.register(TaskLog)
class TaskLogAdmin(admin.ModelAdmin):
    list_display = ["task", "worker", "updated_at"]
    search_fields = ["task__name", "task__pk"]
    list_select_related = ["task", "worker"]
    fields = ["task", "worker", "updated_at", "tail"]
    readonly_fields = fields

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False


from apps.pools import admin_maintenance  # noqa: E402, F401
