"""The admin of profiles, resource policies and compute resources: their forms, inlines and
orderings, and the audited quota writes. The policies' list with each one's use (GPUs in use, budget
hours used and left) is the ledger's, which registers the policies' admin (``apps.ledger.admin_policies``)."""

from django import forms
from django.contrib import admin
from django.core.exceptions import NON_FIELD_ERRORS, FieldDoesNotExist, ValidationError
from django.db.models import Count, Q
from django.forms.models import BaseInlineFormSet

from apps.accounts.admin_scope import TenantScoped
from apps.core.admin_forms import LinkRowForm
from apps.core.fields import PLAIN_NUMBERS, PlainIntegerFormField
from apps.core.formsets import CappedInline
from apps.policies import money_windows, rules, selectors, services
from apps.policies.admin_columns import default_time_limit, gpu_size, max_time_limit, min_runtime, time_weight
from apps.policies.models import (
    BudgetWindow,
    ComputeResource,
    PolicyChange,
    PriorityClass,
    Profile,
    ProfilePool,
    ResourcePolicy,
)
from klique import numbers


class PoolLinkForm(LinkRowForm):
    """A pool of the profile; the GPU resource count left empty is 1."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["gpu_resource_count"].required = False

    def clean_gpu_resource_count(self):
        count = self.cleaned_data.get("gpu_resource_count")
        return 1 if count is None else count


class PoolOrderInline(CappedInline, admin.TabularInline):
    """The profile's pools in order: work goes to the first pool with capacity, then the next."""

    formfield_overrides = PLAIN_NUMBERS

    model = ProfilePool
    form = PoolLinkForm
    fk_name = "profile"
    fields = ["pool_rank", "pool", "profile_rank", "gpu_resource", "gpu_resource_count"]
    readonly_fields = ["profile_rank"]
    ordering = ["pool_rank", "pk"]
    extra = 0
    verbose_name = "pool (pool order)"
    verbose_name_plural = "pools in order (first pool first)"
    autocomplete_fields = ["pool"]


class QueuingOrderInline(CappedInline, admin.TabularInline):
    """The profile's policies in queuing priority: the first group's work is placed first."""

    formfield_overrides = PLAIN_NUMBERS

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


class ProfileForm(forms.ModelForm):
    """A profile; the minimum runtime and the default priority left empty are 0."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for name in ("min_runtime_s", "default_priority"):
            if name in self.fields:
                self.fields[name].required = False

    def clean_min_runtime_s(self):
        seconds = self.cleaned_data.get("min_runtime_s")
        return 0 if seconds is None else seconds

    def clean_default_priority(self):
        priority = self.cleaned_data.get("default_priority")
        return 0 if priority is None else priority


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    form = ProfileForm
    list_display = [
        "name",
        gpu_size,
        "size_from_task",
        time_weight,
        min_runtime,
        default_time_limit,
        max_time_limit,
        "constraints",
        "pool_order",
    ]
    list_filter = ["size_from_task", "sovereign_country"]
    search_fields = ["name", "description"]
    readonly_fields = ["suggested_order"]
    inlines = [PoolOrderInline, QueuingOrderInline]
    actions = ["order_pools_newest_first"]

    @admin.display(description="pool order")
    def pool_order(self, profile: Profile) -> str:
        links = sorted(profile.pool_links.all(), key=lambda link: (link.pool_rank, link.pk))
        return " → ".join(link.pool.name for link in links)

    @admin.display(description="pools must meet")
    def constraints(self, profile: Profile) -> str:
        return ", ".join(profile.constraints) or "-"

    @admin.display(description="suggested pool order")
    def suggested_order(self, profile: Profile) -> str:
        """Every pool that fits the profile, newest hardware first (GPU generation, then memory)."""
        if profile.pk is None:
            return "-"
        listed = set(profile.pool_links.values_list("pool_id", flat=True))
        return (
            " → ".join(
                f"{pool.name} ({pool.gpu_type}, generation {pool.gpu_type.generation}, "
                f"{pool.gpu_type.memory_gb} GB{'' if pool.pk in listed else ', not listed'})"
                for pool in selectors.suggested_pool_order(profile)
            )
            or "No pool fits this profile."
        )

    @admin.action(description="Order the selected profiles' pools newest hardware first")
    def order_pools_newest_first(self, request, queryset):
        for profile in queryset:
            pools = services.order_pools_newest_first(profile)
            self.message_user(request, f"{profile}: {' → '.join(p.name for p in pools) or 'no pools'}.")

    def get_formset_kwargs(self, request, obj, inline, prefix):
        """The pool inline checks each link against the profile as submitted, so the profile's own
        rule skips the stored links (which the same form may be removing)."""
        if isinstance(inline, PoolOrderInline):
            obj.links_checked_by_form = True
        return super().get_formset_kwargs(request, obj, inline, prefix)

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


class PolicyScoped(TenantScoped):
    """Rows of a policy: a tenant admin connects the policies strictly below their root, and only
    to the profiles IT made available to the tenant: those a policy in the subtree is connected to
    (IT connects the first, e.g. the root's, disabled if nobody should submit there)."""

    tenant_group = "policy__group"

    def get_readonly_fields(self, request, obj=None):
        """A tenant admin connects but does not reorder: the queuing priority, which also orders
        one tenant's work against another's, stays IT's; a new compute resource goes last."""
        fields = list(super().get_readonly_fields(request, obj))
        if self.scope(request) is not None:
            fields.append("queuing_rank")
        return fields

    def tenant_choices(self, request, db_field, scope):
        model = db_field.remote_field.model
        if model is ResourcePolicy:
            return ResourcePolicy.objects.filter(group__in=self.owned(scope))
        if model is Profile:
            return Profile.objects.filter(compute_resources__policy__group__in=scope.groups).distinct()
        return super().tenant_choices(request, db_field, scope)


class PolicyComputeResourceInline(CappedInline, PolicyScoped, admin.TabularInline):
    formfield_overrides = PLAIN_NUMBERS
    model = ComputeResource
    fk_name = "policy"
    fields = ["name", "profile", "queuing_rank", "enabled"]
    extra = 0
    autocomplete_fields = ["profile"]
    show_change_link = True


class BudgetWindowFormSet(BaseInlineFormSet):
    """The further budget windows of a policy, checked together against the policy as submitted:
    time windows by ``rules.budget_window_errors`` (one per period, not the policy's own period,
    inside the parent's window of the same period), money windows by
    ``money_windows.money_window_errors`` (one per period)."""

    def clean(self):
        super().clean()
        if any(self.errors):
            return
        windows: dict = {}
        money: dict = {}
        for form in self.forms:
            data = getattr(form, "cleaned_data", None)
            if not data or self._should_delete_form(form) or data.get("period") is None:
                continue
            period = data["period"]
            if data.get("amount") is not None:
                if period in money:
                    raise ValidationError(f"Two money windows per {period}; one money window per period.")
                money[period] = (data["amount"], data.get("currency") or "")
                continue
            if period in windows:
                raise ValidationError(f"Two further windows per {period}; one window per period.")
            windows[period] = data.get("hours")
        errors = rules.budget_window_errors(self.instance, windows)
        for field, messages in money_windows.money_window_errors(money).items():
            errors.setdefault(field, []).extend(messages)
        if errors:
            raise ValidationError([message for messages in errors.values() for message in messages])


class BudgetWindowInline(CappedInline, PolicyScoped, admin.TabularInline):
    """Further budget windows besides the policy's own time budget, e.g. 8 budget hours a day and
    100 a month, or 500 EUR a month (an amount and a currency, no hours): every window is enforced
    at once."""

    formfield_overrides = PLAIN_NUMBERS
    model = BudgetWindow
    formset = BudgetWindowFormSet
    fields = ["period", "hours", "amount", "currency"]
    extra = 0
    new_rows = 6  # a time and a money window per period: day, week, month


LENDING_DEFAULTS = ("lending", "over_quota_weight")


class ResourcePolicyForm(forms.ModelForm):
    """The policy's form carries the version it was rendered from. The admin validates and saves a
    change in one transaction, so ``clean`` takes the quota write's locks (``lock_policies``) and
    checks the version before the rules run: a policy saved since is refused, and the form shows
    the current values instead of overwriting them."""

    seen_version = PlainIntegerFormField(
        widget=forms.HiddenInput, required=False, min_value=1, help_text="The policy's version when shown."
    )

    class Meta:
        model = ResourcePolicy
        fields = ["group", *ResourcePolicy.SETTINGS]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        changing = self.instance.pk is not None
        self.fields["seen_version"].required = changing
        if changing:
            self.fields["seen_version"].initial = self.instance.version
        for name in LENDING_DEFAULTS:
            if name in self.fields:  # absent on a page shown read-only
                self.fields[name].required = False

    def _kept(self, name: str):
        """Lending and the over-quota weight left out keep the policy's values (a new one's defaults)."""
        value = self.cleaned_data.get(name)
        return getattr(self.instance, name) if value in (None, "") else value

    def clean_lending(self):
        return self._kept("lending")

    def clean_over_quota_weight(self):
        return self._kept("over_quota_weight")

    def clean(self):
        cleaned = super().clean()
        if self.instance.pk is not None and cleaned.get("seen_version") is not None:
            moved_to = ResourcePolicy(group=cleaned.get("group") or self.instance.group)
            try:
                services.lock_policies(
                    [self.instance, moved_to], versions={self.instance.pk: cleaned["seen_version"]}
                )
            except services.QuotaChanged as changed:
                self._show(changed.current[0])
                raise ValidationError(changed.message, code="stale") from None
        return cleaned

    def _post_clean(self):
        if not self.stale:
            super()._post_clean()

    def _show(self, current: ResourcePolicy) -> None:
        """Render the stored values and version, so that saving again is a decision on them."""
        data = self.data.copy()
        for name in self.fields:
            try:
                attname = ResourcePolicy._meta.get_field(name).attname
            except FieldDoesNotExist:
                continue
            value = getattr(current, attname)
            data[self.add_prefix(name)] = "" if value is None else value
        data[self.add_prefix("seen_version")] = current.version
        self.data = data

    @property
    def stale(self) -> bool:
        return any(error.code == "stale" for error in self.errors.as_data().get(NON_FIELD_ERRORS, []))


class ResourcePolicyAdmin(TenantScoped, admin.ModelAdmin):
    """A policy's form with its further windows and compute resources, saved and audited as a quota
    write. Registered by the ledger with the use columns (``apps.ledger.admin_policies``)."""

    formfield_overrides = PLAIN_NUMBERS

    form = ResourcePolicyForm

    list_display = ["group", "reserved", "limited", "waiting"]
    list_filter = ["budget_period", "group__kind"]
    search_fields = ["group__name"]
    autocomplete_fields = ["group"]
    list_select_related = ["group"]
    inlines = [BudgetWindowInline, PolicyComputeResourceInline]

    def get_queryset(self, request):
        waiting = Count("compute_resources__tasks", filter=Q(compute_resources__tasks__state="queued"))
        return super().get_queryset(request).annotate(waiting_count=waiting)

    class Media:
        css = {"all": ["klique/admin.css"]}

    @admin.display(description="reservation", ordering="reservation")
    def reserved(self, policy):
        return numbers.gpus(policy.reservation)

    @admin.display(description="limit", ordering="limit")
    def limited(self, policy):
        return numbers.gpus(policy.limit)

    @admin.display(description="waiting", ordering="waiting_count")
    def waiting(self, policy):
        return policy.waiting_count

    def save_formset(self, request, form, formset, change):
        """The further windows are saved under the locks the form took; a change is audited. A
        compute resource a tenant admin adds goes last in its profile's queuing order."""
        if formset.model is ComputeResource and self.scope(request) is not None:
            for item in formset.save(commit=False):
                if item.pk is None:
                    item.queuing_rank = services.last_queuing_rank(item.profile)
                item.save()
            for item in formset.deleted_objects:
                item.delete()
            return None
        if formset.model is not BudgetWindow:
            return super().save_formset(request, form, formset, change)
        before = services.quota_of(form.instance)
        before["further_budgets"] = form.windows_before
        formset.save()
        money = [form.money_before, money_windows.windows_text(money_windows.money_budgets_of(form.instance))]
        also = {money_windows.FIELD: money} if money[0] != money[1] else None
        services.record_quota_change(
            form.instance, before, actor=request.user, via=PolicyChange.Via.ADMIN, also=also
        )

    def save_related(self, request, form, formsets, change):
        form.windows_before = services.windows_text(services.extra_budgets_of(form.instance))
        form.money_before = money_windows.windows_text(money_windows.money_budgets_of(form.instance))
        super().save_related(request, form, formsets, change)

    def save_model(self, request, obj, form, change):
        services.save_policy(
            obj, version=form.cleaned_data.get("seen_version"), actor=request.user, via=PolicyChange.Via.ADMIN
        )

    def render_change_form(self, request, context, *args, **kwargs):
        response = super().render_change_form(request, context, *args, **kwargs)
        if getattr(context.get("adminform"), "form", None) is not None and context["adminform"].form.stale:
            response.status_code = 409
        return response

    fieldsets = [
        (None, {"fields": ["group", "seen_version"]}),
        ("How much at once", {"fields": ["reservation", "limit"]}),
        ("How long", {"fields": ["budget_hours", "budget_period", "alert_threshold"]}),
        ("Reclaim", {"fields": ["max_preemptions_per_hour"]}),
        (
            "Lending",
            {
                "fields": ["lendable", "lending", "over_quota_weight"],
                "description": "What the group lends of its idle reservation, how its child groups share "
                "what they borrow, and this group's weight when its parent lends fairly.",
            },
        ),
    ]


@admin.register(PriorityClass)
class PriorityClassAdmin(admin.ModelAdmin):
    """The named priorities users may ask for (``--priority high``); IT's alone."""

    formfield_overrides = PLAIN_NUMBERS
    list_display = ["name", "value", "description"]
    search_fields = ["name", "description"]


@admin.register(ComputeResource)
class ComputeResourceAdmin(PolicyScoped, admin.ModelAdmin):
    formfield_overrides = PLAIN_NUMBERS
    list_display = [
        "name",
        "policy",
        "profile",
        "queuing_rank",
        "default_priority",
        "max_priority",
        default_time_limit,
        max_time_limit,
        "enabled",
    ]
    list_filter = ["enabled", ("profile", admin.RelatedOnlyFieldListFilter)]
    search_fields = ["name", "policy__group__name", "profile__name"]
    autocomplete_fields = ["policy", "profile"]
    list_select_related = ["policy__group", "profile"]

    def save_model(self, request, obj, form, change):
        if not change and self.scope(request) is not None:
            obj.queuing_rank = services.last_queuing_rank(obj.profile)
        super().save_model(request, obj, form, change)


# the pools' admin (profile order, reservations behind them) and the dated quota loans'
from apps.policies import admin_loans, admin_pools  # noqa: E402, F401
