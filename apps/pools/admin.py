from django.contrib import admin, messages
from django.db.models import Max

from apps.policies.models import ProfilePool
from apps.pools.models import GpuType, Pool, Worker
from apps.pools.selectors import reservations_behind


@admin.register(GpuType)
class GpuTypeAdmin(admin.ModelAdmin):
    list_display = ["name", "memory_gb"]
    search_fields = ["name"]


class ExecutionOrderInline(admin.TabularInline):
    """The pool's profiles in execution priority: the first one's work is placed first."""

    model = ProfilePool
    fk_name = "pool"
    fields = ["profile_rank", "profile", "pool_rank"]
    readonly_fields = ["pool_rank"]
    ordering = ["profile_rank", "pk"]
    extra = 0
    verbose_name = "profile (execution priority)"
    verbose_name_plural = "profiles in execution priority (lower first)"
    autocomplete_fields = ["profile"]


class WorkerInline(admin.TabularInline):
    model = Worker
    fields = ["hostname", "state", "gpus", "last_heartbeat"]
    readonly_fields = ["hostname", "gpus", "last_heartbeat"]
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "gpu_type", "capacity", "region", "enabled"]
    list_filter = ["kind", "gpu_type", "enabled", "region"]
    search_fields = ["name", "region"]
    list_select_related = ["gpu_type"]
    readonly_fields = ["reservations_behind"]
    inlines = [ExecutionOrderInline, WorkerInline]

    @admin.display(description="reservations behind this pool")
    def reservations_behind(self, pool: Pool) -> str:
        if pool.pk is None:
            return "-"
        cover = reservations_behind(pool)
        policies = ", ".join(cover.policies) or "none"
        return f"{cover.reserved} of {cover.capacity} declared GPUs reserved ({policies})"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        pool = self.get_object(request, object_id)
        if pool is not None and request.method == "GET":
            cover = reservations_behind(pool)
            if cover.overcommitted:
                self.message_user(
                    request,
                    f"The reservations of the policies behind {pool} ({cover.reserved} GPUs: "
                    f"{', '.join(cover.policies)}) exceed its declared capacity ({cover.capacity} GPUs); "
                    "those guarantees can only be met if other pools in their profiles have room.",
                    level=messages.WARNING,
                )
        return super().change_view(request, object_id, form_url, extra_context)

    def save_formset(self, request, form, formset, change):
        links = formset.save(commit=False)
        for link in links:
            if link.pk is None:
                last = ProfilePool.objects.filter(profile=link.profile).aggregate(m=Max("pool_rank"))["m"]
                link.pool_rank = 0 if last is None else last + 1
            link.save()
        for obj in formset.deleted_objects:
            obj.delete()
        formset.save_m2m()


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    list_display = ["hostname", "pool", "state", "gpus", "last_heartbeat", "enrolled_at"]
    list_filter = ["state", "pool"]
    search_fields = ["hostname"]
    readonly_fields = ["token_hash", "enrolled_at", "last_heartbeat"]
    list_select_related = ["pool"]
