"""IT's admin for the worker daemons: their state, GPUs and heartbeats, and retiring one (its tasks
go back to the queue). The workers' rows are the estate's (apps.pools); retiring is the protocol's."""

from django.contrib import admin
from django.utils import timezone

from apps.core.fields import PLAIN_NUMBERS
from apps.pools.models import Worker
from apps.workers import services


@admin.register(Worker)
class WorkerAdmin(admin.ModelAdmin):
    """Workers come from enrolment; IT can only retire them (their tasks go back to the queues)."""

    formfield_overrides = PLAIN_NUMBERS

    list_display = ["hostname", "pool", "mode", "state", "gpus", "free_gpus", "last_heartbeat", "enrolled_at"]
    list_filter = ["state", "mode", "pool"]
    search_fields = ["hostname"]
    fields = [
        "pool",
        "hostname",
        "mode",
        "version",
        "state",
        "gpus",
        "free_gpus",
        "gpu_stats",
        "enrolment_token",
        "enrolled_at",
        "last_heartbeat",
        "lost_at",
    ]
    readonly_fields = fields
    list_select_related = ["pool"]
    actions = ["retire"]

    def has_add_permission(self, request):
        return False

    @admin.action(description="Retire the selected workers (their tasks are requeued)")
    def retire(self, request, queryset):
        now = timezone.now()
        workers = list(queryset.exclude(state=Worker.State.RETIRED))
        requeued = sum(services.retire(worker, now) for worker in workers)
        self.message_user(
            request, f"Retired {len(workers)} workers; {requeued} of their tasks were requeued."
        )

    def has_delete_permission(self, request, obj=None):
        """Retire a worker instead: its tasks are requeued and its history stays."""
        return False
