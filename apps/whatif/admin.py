"""What-if runs in the admin, for IT admins only: listed read-only (who ran which period, its
state and progress); runs are started from the portal, the API or the CLI, never here. A run may
be deleted."""

from django.contrib import admin

from apps.accounts.models import Membership
from apps.accounts.selectors import has_role
from apps.whatif.models import WhatIfRun
from klique import numbers


@admin.register(WhatIfRun)
class WhatIfRunAdmin(admin.ModelAdmin):
    list_display = ["__str__", "created_by", "start", "end", "state", "progress_shown", "created_at"]
    list_filter = ["state"]
    search_fields = ["title", "created_by__username"]
    list_select_related = ["created_by"]
    date_hierarchy = "created_at"
    fields = [
        "title",
        "created_by",
        "created_at",
        "start",
        "end",
        "groups",
        "changes",
        "wait_threshold_s",
        "state",
        "progress_shown",
        "tasks",
        "error",
        "started_at",
        "finished_at",
        "report_shown",
    ]
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).defer("report")

    @admin.display(description="progress")
    def progress_shown(self, run: WhatIfRun) -> str:
        return numbers.percent(run.progress)

    @admin.display(description="report")
    def report_shown(self, run: WhatIfRun) -> str:
        report = run.report
        if not report:
            return numbers.NONE
        groups, pools = len(report["base"]["groups"]), len(report["base"]["pools"])
        return f"{groups} groups and {pools} pools compared: open the run in the portal, the API or the CLI."

    def _it_admin(self, request) -> bool:
        return has_role(request.user, Membership.Role.IT_ADMIN)

    def has_module_permission(self, request):
        return self._it_admin(request) and super().has_module_permission(request)

    def has_view_permission(self, request, obj=None):
        return self._it_admin(request) and super().has_view_permission(request, obj)

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return self._it_admin(request) and super().has_delete_permission(request, obj)
