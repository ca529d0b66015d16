from contextvars import ContextVar
from decimal import Decimal

from django import forms
from django.contrib import admin
from django.core.exceptions import NON_FIELD_ERRORS, ValidationError
from django.db.models import Count, Q

from apps.policies import services
from apps.policies.models import ComputeResource, PolicyChange, Profile, ProfilePool, ResourcePolicy


class PoolOrderInline(admin.TabularInline):
    """The profile's pools in order: work goes to the first pool with capacity, then the next."""

    model = ProfilePool
    fk_name = "profile"
    fields = ["pool_rank", "pool", "profile_rank"]
    readonly_fields = ["profile_rank"]
    ordering = ["pool_rank", "pk"]
    extra = 0
    verbose_name = "pool (pool order)"
    verbose_name_plural = "pools in order (first pool first)"
    autocomplete_fields = ["pool"]


class LinkRowForm(forms.ModelForm):
    """An inline row whose model rules may name the hidden link to the parent (a compute resource's
    ``profile`` on the profile's page): those messages are shown as the row's own errors, not
    attached to a field the page does not show."""

    def add_error(self, field, error):
        if field is None and isinstance(error, ValidationError) and hasattr(error, "error_dict"):
            hidden = {name for name, form_field in self.fields.items() if form_field.widget.is_hidden}
            moved: dict[str, list] = {}
            for name, messages in error.error_dict.items():
                moved.setdefault(NON_FIELD_ERRORS if name in hidden else name, []).extend(messages)
            error = ValidationError(moved)
        super().add_error(field, error)


class QueuingOrderInline(admin.TabularInline):
    """The profile's policies in queuing priority: the first group's work is placed first."""

    model = ComputeResource
    form = LinkRowForm
    fk_name = "profile"
    fields = ["queuing_rank", "name", "policy", "enabled"]
    ordering = ["queuing_rank", "pk"]
    extra = 0
    verbose_name = "compute resource (queuing priority)"
    verbose_name_plural = "policies in queuing priority (lower first), as compute resources"
    autocomplete_fields = ["policy"]
    show_change_link = True


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    list_display = ["name", "gpus", "size_from_task", "time_weight", "pool_order"]
    list_filter = ["size_from_task"]
    search_fields = ["name", "description"]
    inlines = [PoolOrderInline, QueuingOrderInline]

    @admin.display(description="pool order")
    def pool_order(self, profile: Profile) -> str:
        links = sorted(profile.pool_links.all(), key=lambda link: (link.pool_rank, link.pk))
        return " → ".join(link.pool.name for link in links)

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("pool_links__pool")

    def save_formset(self, request, form, formset, change):
        items = formset.save(commit=False)
        for item in items:
            if item.pk is None and isinstance(item, ProfilePool):
                item.profile_rank = services.next_profile_rank(item.pool)
            item.save()
        for obj in formset.deleted_objects:
            obj.delete()
        formset.save_m2m()


class PolicyComputeResourceInline(admin.TabularInline):
    model = ComputeResource
    fk_name = "policy"
    fields = ["name", "profile", "queuing_rank", "enabled"]
    extra = 0
    autocomplete_fields = ["profile"]
    show_change_link = True


_budget_statuses: ContextVar[dict | None] = ContextVar("budget_statuses", default=None)


@admin.register(ResourcePolicy)
class ResourcePolicyAdmin(admin.ModelAdmin):
    """Policies with live columns: GPUs in use (subtree), borrowed, waiting, budget used and left."""

    list_display = [
        "group",
        "reservation",
        "limit",
        "in_use",
        "borrowed",
        "waiting",
        "budget_hours",
        "budget_period",
        "budget_used",
        "budget_left",
        "projected_run_out",
        "alert_threshold",
    ]
    list_filter = ["budget_period", "group__kind"]
    search_fields = ["group__name"]
    autocomplete_fields = ["group"]
    list_select_related = ["group"]
    inlines = [PolicyComputeResourceInline]

    def changelist_view(self, request, extra_context=None):
        from apps.ledger.budgets import budget_status

        token = _budget_statuses.set(budget_status())
        try:
            response = super().changelist_view(request, extra_context)
            return response.render() if hasattr(response, "render") else response
        finally:
            _budget_statuses.reset(token)

    def get_queryset(self, request):
        waiting = Count("compute_resources__tasks", filter=Q(compute_resources__tasks__state="queued"))
        return super().get_queryset(request).annotate(waiting_count=waiting)

    def _status(self, policy):
        return (_budget_statuses.get() or {}).get(policy.pk)

    @admin.display(description="in use")
    def in_use(self, policy):
        status = self._status(policy)
        return status.gpus_in_use if status else "-"

    @admin.display(description="borrowed")
    def borrowed(self, policy):
        status = self._status(policy)
        return max(status.gpus_in_use - policy.reservation, Decimal(0)) if status else "-"

    @admin.display(description="waiting", ordering="waiting_count")
    def waiting(self, policy):
        return policy.waiting_count

    @admin.display(description="budget used (h)")
    def budget_used(self, policy):
        status = self._status(policy)
        return status.used_hours if status and status.has_budget else "-"

    @admin.display(description="budget left (h)")
    def budget_left(self, policy):
        status = self._status(policy)
        return status.left_hours if status and status.has_budget else "-"

    @admin.display(description="projected run-out")
    def projected_run_out(self, policy):
        status = self._status(policy)
        if not status or not status.has_budget:
            return "-"
        return status.run_out_text()

    def save_model(self, request, obj, form, change):
        before = services.quota_of(ResourcePolicy.objects.get(pk=obj.pk)) if change else None
        super().save_model(request, obj, form, change)
        if before is not None:
            services.record_quota_change(obj, before, actor=request.user, via=PolicyChange.Via.ADMIN)

    fieldsets = [
        (None, {"fields": ["group"]}),
        ("How much at once", {"fields": ["reservation", "limit"]}),
        ("How long", {"fields": ["budget_hours", "budget_period", "alert_threshold"]}),
    ]


@admin.register(ComputeResource)
class ComputeResourceAdmin(admin.ModelAdmin):
    list_display = ["name", "policy", "profile", "queuing_rank", "enabled"]
    list_filter = ["enabled", "profile"]
    search_fields = ["name", "policy__group__name", "profile__name"]
    autocomplete_fields = ["policy", "profile"]
    list_select_related = ["policy__group", "profile"]
