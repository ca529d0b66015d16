"""IT's Django admin for pools with their profile order (the execution order inline) and the
reservations behind each: registered by the policies app, which owns pools and profiles together
(docs/architecture.md). The GPU types, workers, tokens and logs are in ``apps.pools.admin``."""

from django import forms
from django.contrib import admin, messages
from django.db.models import OuterRef, Q, Subquery, Sum
from django.utils.html import format_html, format_html_join

from apps.core.admin_forms import LinkRowForm
from apps.core.fields import PLAIN_NUMBERS
from apps.core.formsets import CappedInline
from apps.policies import services as policies
from apps.policies.models import ProfilePool
from apps.policies.selectors import reservations_behind
from apps.pools.admin import WorkerInline
from apps.pools.models import Pool, PoolCapacityChange, Worker
from apps.pools.selectors import effective_capacity
from klique import numbers


class ExecutionOrderInline(CappedInline, admin.TabularInline):
    """The pool's profiles in execution priority: the first one's work is placed first."""

    formfield_overrides = PLAIN_NUMBERS

    model = ProfilePool
    form = LinkRowForm
    fk_name = "pool"
    fields = ["profile_rank", "profile", "pool_rank"]
    readonly_fields = ["pool_rank"]
    ordering = ["profile_rank", "pk"]
    extra = 0
    verbose_name = "profile (execution priority)"
    verbose_name_plural = "profiles in execution priority (lower first)"
    autocomplete_fields = ["profile"]


class ByKindSelect(forms.NullBooleanSelect):
    def __init__(self, attrs=None):
        super().__init__(attrs)
        self.choices = [("unknown", "By kind"), ("true", "Yes"), ("false", "No")]


class PoolForm(forms.ModelForm):
    """``multi_node`` left on "by kind" follows the pool's kind (Kubernetes and HPC: yes)."""

    multi_node = forms.NullBooleanField(
        label="Multi-node",
        required=False,
        widget=ByKindSelect,
        help_text=Pool._meta.get_field("multi_node").help_text,
    )
    capacity_reason = forms.CharField(
        label="Reason for a capacity change",
        max_length=200,
        required=False,
        help_text="Kept in the capacity history when the declared capacity or enabled changes.",
    )

    class Meta:
        model = Pool
        fields = [
            "name",
            "kind",
            "gpu_type",
            "capacity",
            "region",
            "country",
            "enabled",
            "multi_node",
            "namespace",
            "namespace_per_group",
            "claim_timeout_s",
        ]


@admin.register(Pool)
class PoolAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    form = PoolForm
    list_display = [
        "name",
        "kind",
        "gpu_type",
        "declared",
        "observed",
        "in_use",
        "region",
        "country",
        "multi_node",
        "enabled",
    ]
    list_filter = ["kind", "gpu_type", "multi_node", "enabled", "region", "country"]
    search_fields = ["name", "region"]
    list_select_related = ["gpu_type"]
    readonly_fields = ["observed", "reservations_behind", "capacity_history"]
    inlines = [ExecutionOrderInline, WorkerInline]

    def save_model(self, request, obj, form, change):
        reason = form.cleaned_data.get("capacity_reason") or ("changed" if change else "created")
        obj.capacity_note = {"by": request.user, "reason": f"{reason} (admin)"}
        super().save_model(request, obj, form, change)

    def get_queryset(self, request):
        held = Sum("intervals__gpus", filter=Q(intervals__end__isnull=True))
        live = Worker.objects.filter(pool=OuterRef("pk"), state=Worker.State.ACTIVE).values("pool")
        live = Subquery(live.annotate(gpus=Sum("gpus")).values("gpus")[:1])
        return super().get_queryset(request).annotate(gpus_in_use=held, live_gpus=live)

    @admin.display(description="live daemons have")
    def observed(self, pool: Pool) -> str:
        """The GPUs of the pool's active worker daemons against the declared capacity; the engine
        places against the smaller (``apps.pools.selectors.effective_capacity``)."""
        if pool.pk is None:
            return "-"
        live = pool.live_gpus  # annotated by get_queryset, for the list and the change page alike
        if live is None:
            return "no live daemon"
        if live == pool.capacity:
            return numbers.gpus(live)
        return format_html(
            '{} <strong class="warning">differs from the declared {}: the engine places against {}</strong>',
            numbers.gpus(live),
            numbers.gpus(pool.capacity),
            numbers.gpus(effective_capacity(pool.capacity, live)),
        )

    @admin.display(description="capacity", ordering="capacity")
    def declared(self, pool: Pool) -> str:
        return numbers.gpus(pool.capacity)

    @admin.display(description="in use / declared", ordering="gpus_in_use")
    def in_use(self, pool: Pool) -> str:
        return f"{numbers.gpus(pool.gpus_in_use or 0)} / {numbers.gpus(pool.capacity)}"

    @admin.display(description="capacity history")
    def capacity_history(self, pool: Pool) -> str:
        """Newest first, read-only: every save that changes the capacity or enabled writes a row."""
        if pool.pk is None:
            return "-"
        rows = PoolCapacityChange.objects.filter(pool=pool).select_related("by").order_by("-at", "-pk")
        return format_html(
            "<table><tr><th>in force from (UTC)</th><th>declared GPUs</th><th>live daemons' GPUs</th>"
            "<th>enabled</th><th>by</th><th>reason</th></tr>{}</table>",
            format_html_join(
                "",
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                (
                    (
                        f"{row.at:%Y-%m-%d %H:%M}",
                        numbers.gpus(row.capacity),
                        "-" if row.observed is None else numbers.gpus(row.observed),
                        "yes" if row.enabled else "no",
                        row.by or "-",
                        row.reason,
                    )
                    for row in rows
                ),
            ),
        )

    @admin.display(description="reservations behind this pool")
    def reservations_behind(self, pool: Pool) -> str:
        if pool.pk is None:
            return "-"
        cover = reservations_behind(pool)
        policies = ", ".join(cover.policies) or "none"
        reserved, declared = numbers.gpus(cover.reserved), numbers.gpus(cover.capacity)
        return f"{reserved} of {declared} declared GPUs reserved ({policies})"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        pool = self.get_object(request, object_id)
        if pool is not None and request.method == "GET":
            cover = reservations_behind(pool)
            if cover.overcommitted:
                self.message_user(
                    request,
                    f"The reservations of the policies behind {pool} ({numbers.gpus(cover.reserved)} GPUs: "
                    f"{', '.join(cover.policies)}) exceed its declared capacity "
                    f"({numbers.gpus(cover.capacity)} GPUs); "
                    "those guarantees can only be met if other pools in their profiles have room.",
                    level=messages.WARNING,
                )
        return super().change_view(request, object_id, form_url, extra_context)

    def get_formset_kwargs(self, request, obj, inline, prefix):
        """The profile inline checks each link against the pool as submitted, so the pool's own
        rule skips the stored links (which the same form may be removing)."""
        if isinstance(inline, ExecutionOrderInline):
            obj.links_checked_by_form = True
        return super().get_formset_kwargs(request, obj, inline, prefix)

    def save_formset(self, request, form, formset, change):
        links = formset.save(commit=False)
        for link in links:
            if link.pk is None:
                link.pool_rank = policies.next_pool_rank(link.profile)
            link.save()
        for obj in formset.deleted_objects:
            obj.delete()
        formset.save_m2m()
