"""Filters of the portal's tables (django-filter). A bad value is refused on the form, with a 400.

Every table of a role's view has one. A table built from a list of figures (a pool's use, a
team's members) is filtered on its model: the view keeps the rows whose object the filter's
queryset keeps (``views._kept``). A usage report's table is filtered by the ledger itself
(``UsageFilter.spec``), so that its total is the total of what is shown."""

import django_filters
from django.db.models import Q

from apps.accounts.models import Group, Membership, Notification, Project
from apps.engine.models import PassRecord
from apps.policies.models import ComputeResource, PolicyChange, ResourcePolicy
from apps.pools.models import GpuType, Pool
from apps.portal.my_work import WORK_STATES
from apps.tasks.models import Task, TaskEvent


class TaskFilter(django_filters.FilterSet):
    where = django_filters.ChoiceFilter(
        label="State", choices=[(k, k) for k in WORK_STATES], method="filter_where", empty_label="any"
    )
    compute_resource = django_filters.CharFilter(
        field_name="compute_resource__name", lookup_expr="icontains", label="Compute resource"
    )

    class Meta:
        model = Task
        fields = []

    def filter_where(self, queryset, name, value):
        return queryset.filter(WORK_STATES[value])


class EventFilter(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=TaskEvent.Kind.choices, empty_label="any")
    pool = django_filters.CharFilter(field_name="pool__name", label="Pool")
    task = django_filters.NumberFilter(field_name="task_id", label="Task")
    compute_resource = django_filters.CharFilter(
        field_name="task__compute_resource__name", lookup_expr="icontains", label="Compute resource"
    )

    class Meta:
        model = TaskEvent
        fields = []


class QueueFilter(django_filters.FilterSet):
    group = django_filters.CharFilter(
        field_name="policy__group__name", lookup_expr="icontains", label="Group"
    )
    waiting_only = django_filters.ChoiceFilter(
        label="Work waiting",
        choices=[("yes", "only with work waiting")],
        empty_label="any",
        method="filter_waiting",
    )

    class Meta:
        model = ComputeResource
        fields = []

    def filter_waiting(self, queryset, name, value):
        return queryset.filter(waiting__gt=0) if value == "yes" else queryset


class NotificationFilter(django_filters.FilterSet):
    kind = django_filters.ChoiceFilter(choices=Notification.Kind.choices, label="Kind", empty_label="any")
    status = django_filters.ChoiceFilter(
        label="Read or unread",
        choices=[("unread", "unread"), ("read", "read")],
        method="filter_status",
        empty_label="all",
    )

    class Meta:
        model = Notification
        fields = []

    def filter_status(self, queryset, name, value):
        return queryset.filter(read_at__isnull=value == "unread")


# Pools: IT's pools, leadership's cloud capacity.


class PoolFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains", label="Pool")
    gpu_type = django_filters.ModelChoiceFilter(
        queryset=GpuType.objects.order_by("name"), label="GPU type", empty_label="any"
    )
    region = django_filters.CharFilter(lookup_expr="icontains")

    class Meta:
        model = Pool
        fields = []


class PoolKindFilter(PoolFilter):
    kind = django_filters.ChoiceFilter(choices=Pool.Kind.choices, empty_label="any")


# Policies: a department's teams, IT's budgets near their limit.


class PolicyFilter(django_filters.FilterSet):
    group = django_filters.CharFilter(field_name="group__name", lookup_expr="icontains", label="Group")

    class Meta:
        model = ResourcePolicy
        fields = []


class BudgetFilter(PolicyFilter):
    period = django_filters.ChoiceFilter(
        field_name="budget_period", choices=ResourcePolicy.Period.choices, empty_label="any"
    )


class QuotaChangeFilter(django_filters.FilterSet):
    group = django_filters.CharFilter(
        field_name="policy__group__name", lookup_expr="icontains", label="Group"
    )
    actor = django_filters.CharFilter(field_name="actor__username", lookup_expr="icontains", label="By")
    via = django_filters.ChoiceFilter(choices=PolicyChange.Via.choices, empty_label="any")

    class Meta:
        model = PolicyChange
        fields = []


class PassFilter(django_filters.FilterSet):
    skipped = django_filters.ChoiceFilter(
        choices=[("no", "run"), ("yes", "skipped")], method="filter_skipped", empty_label="any"
    )
    changed = django_filters.ChoiceFilter(
        label="Placed or preempted",
        choices=[("yes", "some work"), ("no", "nothing")],
        method="filter_changed",
        empty_label="any",
    )
    slower_than = django_filters.NumberFilter(
        field_name="duration_ms", lookup_expr="gte", label="Duration at least (ms)"
    )

    class Meta:
        model = PassRecord
        fields = []

    def filter_skipped(self, queryset, name, value):
        return queryset.filter(skipped=value == "yes")

    def filter_changed(self, queryset, name, value):
        changed = Q(placed__gt=0) | Q(preempted__gt=0)
        return queryset.filter(changed) if value == "yes" else queryset.exclude(changed)


# A team: its members and projects.


class MemberFilter(django_filters.FilterSet):
    person = django_filters.CharFilter(label="Member", method="filter_person")
    role = django_filters.ChoiceFilter(choices=Membership.Role.choices, empty_label="any")

    class Meta:
        model = Membership
        fields = []

    def filter_person(self, queryset, name, value):
        return queryset.filter(
            Q(user__username__icontains=value)
            | Q(user__first_name__icontains=value)
            | Q(user__last_name__icontains=value)
        )


class ProjectFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains", label="Project")

    class Meta:
        model = Project
        fields = []


class ResourceFilter(django_filters.FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains", label="Compute resource")

    class Meta:
        model = ComputeResource
        fields = []


# Usage and cost from the ledger's reports.


class UsageFilter(django_filters.FilterSet):
    """The filter of a usage report's table. The report is computed by the ledger, not read from a
    queryset: ``spec()`` gives the ``ReportSpec`` filters (a group keeps its subtree), so the
    total under the table is the total of the rows shown. ``groups`` are the groups offered."""

    group = django_filters.ModelChoiceFilter(
        queryset=Group.objects.none(), label="Group and below", empty_label="any", method="by_report"
    )
    level = django_filters.ChoiceFilter(
        choices=Group.Kind.choices, label="Kind", empty_label="any", method="by_report"
    )
    gpu_type = django_filters.ModelChoiceFilter(
        queryset=GpuType.objects.order_by("name"), label="GPU type", empty_label="any", method="by_report"
    )

    class Meta:
        model = Group
        fields = []

    def __init__(self, data=None, *, groups, levels: bool = True, group_label: str = "", **kwargs):
        super().__init__(data, queryset=Group.objects.none(), **kwargs)
        self.filters["group"].queryset = groups
        if group_label:
            self.filters["group"].label = group_label
        if not levels:
            del self.filters["level"]

    def by_report(self, queryset, name, value):
        return queryset  # applied by the ledger's report, through spec()

    def spec(self) -> dict:
        """The report's filters: those of the valid fields that are set."""
        self.is_valid()
        cleaned = getattr(self.form, "cleaned_data", {})
        return {name: cleaned[name] for name in self.filters if cleaned.get(name)}
